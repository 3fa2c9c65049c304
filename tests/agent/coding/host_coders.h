// Host coders for tests that drive the engine by hand: each on a HostStream of its own in
// manual mode, reporting to one io_context, so what has been queued when the priorities
// apply is decided by the test, never by the timing of a thread.
#pragma once

#include <memory>
#include <vector>

#include "agent/coding/host_coder_device.h"
#include "agent/coding/host_stream.h"
#include "agent/coding/local_coder.h"

namespace gcagent::agent {

// The host device seen as a GPU: its memory is not the transport's, so a LocalCoder on it
// stages every encoding and result through host buffers as it does for a GPU; like a GPU
// stream it cannot drop queued work (CoderDevice::cancel waits for it).
class StagedDevice : public CoderDevice {
 public:
  explicit StagedDevice(std::unique_ptr<CoderDevice> inner) : inner_(std::move(inner)) {}
  std::string describe() const override { return "staged host"; }
  void setTag(uint64_t tag, int64_t priority) override { inner_->setTag(tag, priority); }
  Result<std::unique_ptr<DeviceCodec>> makeCodec(const compress::CodecSpec& spec) override {
    return inner_->makeCodec(spec);
  }
  Result<void*> allocateDevice(size_t bytes) override { return inner_->allocateDevice(bytes); }
  Result<void*> allocateHost(size_t bytes) override { return inner_->allocateHost(bytes); }
  void freeDevice(void* p) override { inner_->freeDevice(p); }
  void freeHost(void* p) override { inner_->freeHost(p); }
  Status add(float* dst, const float* src, size_t n, double* seconds) override {
    return inner_->add(dst, src, n, seconds);
  }
  Status divide(float* p, size_t n, float divisor) override { return inner_->divide(p, n, divisor); }
  Status flush(float* dst, float* residual, size_t n) override { return inner_->flush(dst, residual, n); }
  Status zero(void* p, size_t bytes) override { return inner_->zero(p, bytes); }
  Status markNonFinite(const float* p, size_t n, uint32_t* flag) override { return inner_->markNonFinite(p, n, flag); }
  Status copy(void* dst, const void* src, size_t bytes) override { return inner_->copy(dst, src, bytes); }
  void hold(std::shared_ptr<const void> pin) override { inner_->hold(std::move(pin)); }
  void after(Done done) override { inner_->after(std::move(done)); }

 private:
  std::unique_ptr<CoderDevice> inner_;
};

class HostCoders {
 public:
  explicit HostCoders(asio::io_context& io) : io_(io) {}

  // A stream for an engine's host work.
  std::shared_ptr<HostStream> stream() {
    streams_.push_back(std::make_shared<HostStream>(io_, HostStream::Mode::kManual));
    return streams_.back();
  }

  std::shared_ptr<LocalCoder> make(size_t residual_budget_bytes = SIZE_MAX) {
    streams_.push_back(std::make_shared<HostStream>(io_, HostStream::Mode::kManual));
    return std::make_shared<LocalCoder>(makeHostCoderDevice(streams_.back()), residual_budget_bytes);
  }

  // A coder that stages as a GPU's does.
  std::shared_ptr<LocalCoder> makeStaged() {
    streams_.push_back(std::make_shared<HostStream>(io_, HostStream::Mode::kManual));
    return std::make_shared<LocalCoder>(std::make_unique<StagedDevice>(makeHostCoderDevice(streams_.back())));
  }

  // Runs the queued work, highest priority first, and the reports, until none is left.
  // True if anything ran.
  bool poll() {
    bool ran = false;
    for (;;) {
      for (auto& s : streams_) s->drain();
      io_.restart();
      const size_t n = io_.poll();
      ran |= n > 0;
      if (n == 0 && idle()) return ran;
    }
  }

  bool idle() const {
    for (const auto& s : streams_)
      if (!s->idle()) return false;
    return true;
  }

 private:
  asio::io_context& io_;
  std::vector<std::shared_ptr<HostStream>> streams_;
};

}  // namespace gcagent::agent

#include "agent/coding/host_coder_device.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "agent/coding/slice_math.h"
#include "common/str_cat.h"
#include "compress/registry.h"

namespace gcagent::agent {
namespace {

// Where the next piece of work goes: the device's current tag and priority.
struct Target {
  uint64_t tag = 0;
  int64_t priority = 0;
};

// Frees and other work that belongs to no tensor report to no one.
constexpr uint64_t kNoTag = ~uint64_t{0};

// Runs `work`, writing its duration to `seconds` when asked.
template <class Work>
Status timed(double* seconds, Work&& work) {
  const auto start = std::chrono::steady_clock::now();
  Status s = work();
  if (seconds != nullptr) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

class HostCodec : public DeviceCodec {
 public:
  HostCodec(std::shared_ptr<const compress::Codec> codec, HostStream& stream, const Target& target)
      : codec_(std::move(codec)), stream_(stream), target_(target) {}

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const compress::SliceId& id, double* seconds, const uint32_t* skip_if) override {
    const size_t most = codec_->maxEncodedBytes(in.size());
    if (out.size() < most)
      return Status::invalidArgument(strCat("an encoding of ", in.size(), " elements needs ", most, " bytes"));
    stream_.enqueue(target_.tag, target_.priority, [codec = codec_, in, state, out, id, seconds, skip_if] {
      if (skip_if != nullptr && *skip_if != 0) return Status{};
      return timed(seconds, [&] { return codec->encode(in, state, out, id).status(); });
    });
    return most;  // fixed-size codecs write exactly that; sparse ones say their count in front
  }
  Status decode(std::span<const std::byte> in, std::span<float> out, float scale, const compress::SliceId& id,
                double* seconds) override {
    stream_.enqueue(target_.tag, target_.priority, [codec = codec_, in, out, scale, id, seconds] {
      return timed(seconds, [&] { return codec->decode(in, out, scale, id); });
    });
    return {};
  }
  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const compress::SliceId& id,
                   double* seconds) override {
    stream_.enqueue(target_.tag, target_.priority, [codec = codec_, in, acc, id, seconds] {
      return timed(seconds, [&] { return codec->decodeAdd(in, acc, id); });
    });
    return {};
  }

 private:
  std::shared_ptr<const compress::Codec> codec_;  // shared with the work still queued
  HostStream& stream_;
  const Target& target_;
};

class HostCoderDevice : public CoderDevice {
 public:
  HostCoderDevice(std::shared_ptr<HostStream> stream, compress::CodecEnv env)
      : stream_(std::move(stream)), env_(env) {}

  std::string describe() const override { return "host"; }
  bool hostAddressable() const override { return true; }
  void setTag(uint64_t tag, int64_t priority) override { target_ = {tag, priority}; }

  Result<std::unique_ptr<DeviceCodec>> makeCodec(const compress::CodecSpec& spec) override {
    GC_ASSIGN_OR_RETURN(auto codec, compress::makeCodec(spec, env_));
    return std::unique_ptr<DeviceCodec>(
        std::make_unique<HostCodec>(std::shared_ptr<const compress::Codec>(std::move(codec)), *stream_, target_));
  }

  Result<void*> allocateDevice(size_t bytes) override { return allocate(bytes); }
  Result<void*> allocateHost(size_t bytes) override { return allocate(bytes); }
  // After every earlier use, whatever its priority.
  void freeDevice(void* p) override { freeHost(p); }
  void freeHost(void* p) override {
    stream_->enqueue(kNoTag, HostStream::kLast, [p]() -> Status {
      std::free(p);
      return {};
    });
  }

  Status add(float* dst, const float* src, size_t n, double* seconds) override {
    return run([=]() -> Status {
      const auto start = std::chrono::steady_clock::now();
      addInto(dst, src, n);
      if (seconds != nullptr)
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return {};
    });
  }
  Status divide(float* p, size_t n, float divisor) override {
    return run([=]() -> Status {
      divideBy(p, n, divisor);
      return {};
    });
  }
  Status flush(float* dst, float* residual, size_t n) override {
    return run([=]() -> Status {
      addInto(dst, residual, n);
      std::memset(residual, 0, n * sizeof(float));
      return {};
    });
  }
  Status markNonFinite(const float* p, size_t n, uint32_t* flag) override {
    return run([=]() -> Status {
      if (!allFinite(p, n)) *flag = 1;
      return {};
    });
  }
  Status zero(void* p, size_t bytes) override {
    return run([=]() -> Status {
      std::memset(p, 0, bytes);
      return {};
    });
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return run([=]() -> Status {
      std::memmove(dst, src, bytes);
      return {};
    });
  }
  void hold(std::shared_ptr<const void> pin) override {
    if (pin) stream_->hold(target_.tag, target_.priority, std::move(pin));
  }
  void after(Done done) override { stream_->after(target_.tag, target_.priority, std::move(done)); }
  void cancel(Done done) override { stream_->cancel(target_.tag, target_.priority, std::move(done)); }

 private:
  Status run(HostStream::Task task) {
    stream_->enqueue(target_.tag, target_.priority, std::move(task));
    return {};
  }
  static Result<void*> allocate(size_t bytes) {
    void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
    if (p == nullptr) return Status::resourceExhausted(strCat(bytes, " bytes of host memory for the local coder"));
    return p;
  }

  std::shared_ptr<HostStream> stream_;
  compress::CodecEnv env_;
  Target target_;
};

}  // namespace

std::unique_ptr<CoderDevice> makeHostCoderDevice(std::shared_ptr<HostStream> stream, compress::CodecEnv env) {
  return std::make_unique<HostCoderDevice>(std::move(stream), env);
}

std::unique_ptr<CoderDevice> makeHostCoderDevice(asio::io_context& io, compress::CodecEnv env) {
  return makeHostCoderDevice(std::make_shared<HostStream>(io), env);
}

}  // namespace gcagent::agent

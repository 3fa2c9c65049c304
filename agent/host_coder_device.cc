#include "agent/host_coder_device.h"

#include <cstdlib>
#include <cstring>

#include "agent/slice_math.h"
#include "common/str_cat.h"
#include "compress/registry.h"

namespace gcagent::agent {
namespace {

class HostCodec : public DeviceCodec {
 public:
  explicit HostCodec(std::unique_ptr<compress::Codec> codec) : codec_(std::move(codec)) {}
  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const compress::SliceId& id) override {
    return codec_->encode(in, state, out, id);
  }
  Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                const compress::SliceId& id) override {
    return codec_->decode(in, out, scale, id);
  }

 private:
  std::unique_ptr<compress::Codec> codec_;
};

class HostCoderDevice : public CoderDevice {
 public:
  HostCoderDevice(asio::io_context& io, compress::CodecEnv env) : io_(io), env_(env) {}

  std::string describe() const override { return "host"; }
  Result<std::unique_ptr<DeviceCodec>> makeCodec(const compress::CodecSpec& spec) override {
    GC_ASSIGN_OR_RETURN(auto codec, compress::makeCodec(spec, env_));
    return std::unique_ptr<DeviceCodec>(std::make_unique<HostCodec>(std::move(codec)));
  }

  Result<void*> allocateDevice(size_t bytes) override { return allocate(bytes); }
  Result<void*> allocateHost(size_t bytes) override { return allocate(bytes); }
  void freeDevice(void* p) override { std::free(p); }
  void freeHost(void* p) override { std::free(p); }

  Status add(float* dst, const float* src, size_t n) override {
    addInto(dst, src, n);
    return {};
  }
  Status divide(float* p, size_t n, float divisor) override {
    divideBy(p, n, divisor);
    return {};
  }
  Status flush(float* dst, float* residual, size_t n) override {
    addInto(dst, residual, n);
    std::memset(residual, 0, n * sizeof(float));
    return {};
  }
  Status zero(void* p, size_t bytes) override {
    std::memset(p, 0, bytes);
    return {};
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    std::memmove(dst, src, bytes);
    return {};
  }
  void after(Done done) override {
    asio::post(io_, [done = std::move(done)] { done({}); });
  }

 private:
  static Result<void*> allocate(size_t bytes) {
    void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
    if (p == nullptr) return Status::resourceExhausted(strCat(bytes, " bytes of host memory for the local coder"));
    return p;
  }

  asio::io_context& io_;
  compress::CodecEnv env_;
};

}  // namespace

std::unique_ptr<CoderDevice> makeHostCoderDevice(asio::io_context& io, compress::CodecEnv env) {
  return std::make_unique<HostCoderDevice>(io, env);
}

}  // namespace gcagent::agent

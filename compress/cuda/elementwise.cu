// GPU codecs whose every output byte depends only on its own elements and the parameters:
// none, fp16, bf16 (casts, optional error feedback). One pass over the gradient both encodes
// and updates the residual. (The quantizers defined in compress/codecs/ get theirs from
// compress/compll/cuda/quantizer.cu.)
#include <memory>

#include "compress/bf16/bf16_math.h"
#include "compress/cuda/codecs.h"
#include "compress/cuda/launch.cuh"
#include "compress/cuda/stats.cuh"
#include "compress/fp16/fp16_math.h"
#include "compress/params.h"

namespace gcagent::compress::cuda {
namespace {

__device__ __forceinline__ size_t threadIndex() {
  return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
}

// ---- casts

struct Fp16 {
  __device__ static uint16_t fromFloat(float v) { return fp16::fromFloat(v); }
  __device__ static float toFloat(uint16_t h) { return fp16::toFloat(h); }
};
struct Bf16 {
  __device__ static uint16_t fromFloat(float v) { return bf16::fromFloat(v); }
  __device__ static float toFloat(uint16_t h) { return bf16::toFloat(h); }
};

template <class Format, bool kFeedback>
__global__ void castEncode(const float* __restrict__ g, float* __restrict__ r,
                           uint16_t* __restrict__ out, size_t n) {
  const size_t i = threadIndex();
  if (i >= n) return;
  if constexpr (kFeedback) {
    const float x = g[i] + r[i];
    const uint16_t h = Format::fromFloat(x);
    r[i] = x - Format::toFloat(h);
    out[i] = h;
  } else {
    out[i] = Format::fromFloat(g[i]);
  }
}

template <class Format>
__global__ void castDecodeAdd(const uint16_t* __restrict__ in, float* __restrict__ acc, size_t n) {
  const size_t i = threadIndex();
  if (i < n) acc[i] += Format::toFloat(in[i]);
}

__global__ void f32DecodeAdd(const float* __restrict__ in, float* __restrict__ acc, size_t n) {
  const size_t i = threadIndex();
  if (i < n) acc[i] += in[i];
}

class GpuNoneCodec final : public FaultingGpuCodec {
 public:
  std::string_view name() const override { return "none"; }
  size_t stateElements(size_t) const override { return 0; }
  size_t maxEncodedBytes(size_t n) const override { return 4 * n; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId&, GpuStream stream) override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), 0, out.size(), 4 * n));
    if (n == 0) return size_t{0};
    const cudaError_t err =
        cudaMemcpyAsync(out.data(), in.data(), 4 * n, cudaMemcpyDeviceToDevice, toCuda(stream));
    if (err != cudaSuccess)
      return Status::unavailable(strCat("none: gpu copy failed: ", cudaGetErrorString(err)));
    return 4 * n;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&,
                   GpuStream stream) override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), 4 * n));
    GC_RETURN_IF_ERROR(checkAligned(name(), in.data(), "encoded"));
    if (n == 0) return {};
    f32DecodeAdd<<<blocksFor(n), kThreads, 0, toCuda(stream)>>>(
        reinterpret_cast<const float*>(in.data()), acc.data(), n);
    return launched(name());
  }

  Status init() { return initFaults(); }
};

template <class Format>
class GpuCastCodec final : public FaultingGpuCodec {
 public:
  GpuCastCodec(std::string_view name, bool error_feedback)
      : name_(name), error_feedback_(error_feedback) {}

  std::string_view name() const override { return name_; }
  size_t stateElements(size_t n) const override { return error_feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return 2 * n; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId&, GpuStream stream) override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(
        checkEncodeSpans(name_, n, state.size(), stateElements(n), out.size(), 2 * n));
    GC_RETURN_IF_ERROR(checkAligned(name_, out.data(), "output"));
    if (n == 0) return size_t{0};
    auto* dst = reinterpret_cast<uint16_t*>(out.data());
    if (error_feedback_) {
      castEncode<Format, true><<<blocksFor(n), kThreads, 0, toCuda(stream)>>>(in.data(), state.data(), dst, n);
    } else {
      castEncode<Format, false><<<blocksFor(n), kThreads, 0, toCuda(stream)>>>(in.data(), nullptr, dst, n);
    }
    GC_RETURN_IF_ERROR(launched(name_));
    return 2 * n;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&,
                   GpuStream stream) override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name_, n, in.size(), 2 * n));
    GC_RETURN_IF_ERROR(checkAligned(name_, in.data(), "encoded"));
    if (n == 0) return {};
    castDecodeAdd<Format><<<blocksFor(n), kThreads, 0, toCuda(stream)>>>(
        reinterpret_cast<const uint16_t*>(in.data()), acc.data(), n);
    return launched(name_);
  }

  Status init() { return initFaults(); }

 private:
  std::string_view name_;
  bool error_feedback_;
};

template <class C>
Result<std::unique_ptr<GpuCodec>> initialized(std::unique_ptr<C> codec) {
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

}  // namespace

Result<std::unique_ptr<GpuCodec>> makeGpuNone(const Params&) {
  return initialized(std::make_unique<GpuNoneCodec>());
}

Result<std::unique_ptr<GpuCodec>> makeGpuFp16(const Params& params) {
  ParamReader reader("fp16", params);
  const bool feedback = reader.boolean("error_feedback", false);
  GC_RETURN_IF_ERROR(reader.finish());
  return initialized(std::make_unique<GpuCastCodec<Fp16>>("fp16", feedback));
}

Result<std::unique_ptr<GpuCodec>> makeGpuBf16(const Params& params) {
  ParamReader reader("bf16", params);
  const bool feedback = reader.boolean("error_feedback", false);
  GC_RETURN_IF_ERROR(reader.finish());
  return initialized(std::make_unique<GpuCastCodec<Bf16>>("bf16", feedback));
}

}  // namespace gcagent::compress::cuda

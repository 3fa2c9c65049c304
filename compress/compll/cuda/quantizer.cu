// Every quantizer definition's GPU codec: the definition's element math (ScalarLanes) in one
// thread per element, neighbouring threads reading neighbouring floats. The codes of a
// 32-bit word are OR-ed together across the warp's lanes and stored whole; threads past the
// last element add zero codes, the padding of the last word.
#include <memory>

#include "compress/compll/definitions.h"
#include "compress/compll/gpu_quantizer.h"
#include "compress/cuda/launch.cuh"
#include "compress/cuda/stats.cuh"

namespace gcagent::compress::compll {
namespace {

using compress::cuda::FaultingGpuCodec;
using compress::cuda::GpuCodec;
using compress::cuda::GpuStream;

__device__ __forceinline__ size_t threadIndex() { return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; }

template <class Def, bool kFeedback>
__global__ void encodeKernel(const float* __restrict__ g, float* __restrict__ r, uint32_t* __restrict__ out,
                             size_t n, size_t words, typename Def::Params p) {
  using C = typename Def::Codes;
  const size_t i = threadIndex();
  // No early exit: every lane of a warp takes part in the shuffles.
  uint32_t code = 0;
  if (i < n) {
    float ri = kFeedback ? r[i] : 0.0f;
    code = Def::encode(ScalarLanes{}, g[i], ri, p);
    if constexpr (kFeedback) r[i] = ri;
  }
  const uint32_t word = compress::cuda::orOverLanes(
      code << (C::shift(i) + compress::cuda::byteShift(i / C::kPerByte)), C::kPerWord);
  if (i % C::kPerWord == 0 && i / C::kPerWord < words) out[i / C::kPerWord] = word;
}

template <class Def>
__global__ void decodeAddKernel(const uint8_t* __restrict__ codes, float* __restrict__ acc, size_t n,
                                typename Def::Params p) {
  const size_t i = threadIndex();
  if (i < n) acc[i] += Def::decode(ScalarLanes{}, Def::Codes::at(codes, i), p);
}

template <class Def>
class GpuQuantizer final : public FaultingGpuCodec {
  using C = typename Def::Codes;

 public:
  GpuQuantizer(typename Def::Params p, bool feedback) : p_(p), feedback_(feedback) {}

  std::string_view name() const override { return Def::kName; }
  size_t stateElements(size_t n) const override { return feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return C::bytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId&, GpuStream stream) override {
    const size_t n = in.size();
    const size_t bytes = C::bytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), bytes));
    if (n == 0) return bytes;
    GC_RETURN_IF_ERROR(compress::cuda::checkAligned(name(), out.data(), "output"));
    auto* dst = reinterpret_cast<uint32_t*>(out.data());
    const size_t words = bytes / 4;
    const unsigned blocks = compress::cuda::blocksFor(C::kPerWord * words);
    const auto s = compress::cuda::toCuda(stream);
    if (feedback_) {
      encodeKernel<Def, true><<<blocks, compress::cuda::kThreads, 0, s>>>(in.data(), state.data(), dst, n, words, p_);
    } else {
      encodeKernel<Def, false><<<blocks, compress::cuda::kThreads, 0, s>>>(in.data(), nullptr, dst, n, words, p_);
    }
    GC_RETURN_IF_ERROR(compress::cuda::launched(name()));
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&,
                   GpuStream stream) override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), C::bytes(n)));
    if (n == 0) return {};
    decodeAddKernel<Def><<<compress::cuda::blocksFor(n), compress::cuda::kThreads, 0, compress::cuda::toCuda(stream)>>>(
        reinterpret_cast<const uint8_t*>(in.data()), acc.data(), n, p_);
    return compress::cuda::launched(name());
  }

  Status init() { return initFaults(); }

 private:
  typename Def::Params p_;
  bool feedback_;
};

}  // namespace

template <class Def>
Result<std::unique_ptr<GpuCodec>> makeGpuQuantizer(const Params& params) {
  ParamReader reader(Def::kName, params);
  const typename Def::Params p = Def::read(reader);
  const bool feedback = reader.boolean("error_feedback", true);
  GC_RETURN_IF_ERROR(reader.finish());
  auto codec = std::make_unique<GpuQuantizer<Def>>(p, feedback);
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

#define GC_INSTANTIATE(Def) \
  template Result<std::unique_ptr<GpuCodec>> makeGpuQuantizer<codecs::Def>(const Params& params);
GC_FOR_EACH_CODEC(GC_INSTANTIATE)
#undef GC_INSTANTIATE

}  // namespace gcagent::compress::compll

// terngrad on the GPU (see compress/terngrad/terngrad.cc for the format). Per encode: the
// CPU's four-lane sums of x^2 and the maxima of |x| over 4096-element runs, the sums added in
// the CPU's order into the clipping bound and s, and one fused pass
// that draws each element's code from the shared counter-based generator and updates the
// residual. The draws depend only on (seed, slice id, element), so the bytes equal the CPU's.
#include <algorithm>
#include <cmath>
#include <memory>

#include "compress/cuda/codecs.h"
#include "compress/cuda/launch.cuh"
#include "compress/cuda/stats.cuh"
#include "compress/params.h"
#include "compress/random_math.h"
#include "compress/terngrad/terngrad_math.h"

namespace gcagent::compress::cuda {
namespace {

constexpr size_t kBlock = 4096;  // as the CPU codec: the sum's order depends on it
constexpr double kClipSigmas = 2.5;

// One thread block per run of kBlock elements: the run's sum of x^2 and max |x|.
template <bool kFeedback>
__global__ void statRuns(const float* __restrict__ g, const float* __restrict__ r, size_t n,
                         double* __restrict__ squares, float* __restrict__ largest) {
  __shared__ float staged[kBlock];
  __shared__ float warp_most[kStageThreads / 32];
  const size_t begin = blockIdx.x * kBlock;
  const size_t count = smaller(kBlock, n - begin);
  float most = 0.0f;  // the maximum does not depend on order
  for (size_t k = threadIdx.x; k < count; k += blockDim.x) {
    const float x = inputAt<kFeedback>(g, r, begin + k);
    staged[k] = x;
    const float a = terngrad::magnitude(x);
    most = a > most ? a : most;
  }
  for (unsigned offset = 16; offset != 0; offset >>= 1)
    most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, offset));
  if (threadIdx.x % 32 == 0) warp_most[threadIdx.x / 32] = most;
  const double sum = stagedRunSum(staged, count, [](float x) { return static_cast<double>(x) * x; });
  if (threadIdx.x == 0) {
    squares[blockIdx.x] = sum;
    for (unsigned w = 0; w < kStageThreads / 32; ++w) most = fmaxf(most, warp_most[w]);
    largest[blockIdx.x] = most;
  }
}

// One block: s and the bound from the total of x^2 and the runs' maxima.
__global__ void finishScaler(const double* __restrict__ total, const float* __restrict__ largest,
                             size_t runs, size_t n, bool clip, bool feedback,
                             terngrad::Scaler* scaler, float* __restrict__ header, DeviceFault* fault) {
  __shared__ float warp_most[kStageThreads / 32];
  float most = 0.0f;
  for (size_t k = threadIdx.x; k < runs; k += blockDim.x) most = fmaxf(most, largest[k]);
  for (unsigned offset = 16; offset != 0; offset >>= 1)
    most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, offset));
  if (threadIdx.x % 32 == 0) warp_most[threadIdx.x / 32] = most;
  __syncthreads();
  if (threadIdx.x != 0 || faulted(fault)) return;
  for (unsigned w = 0; w < kStageThreads / 32; ++w) most = fmaxf(most, warp_most[w]);
  const double sum_squares = runs == 0 ? 0.0 : *total;
  if (!isfinite(sum_squares)) {
    raiseFault(fault, kFaultNonFinite, feedback ? 1 : 0);
    return;
  }
  float bound = INFINITY;
  if (clip && n > 0) bound = static_cast<float>(kClipSigmas * sqrt(sum_squares / static_cast<double>(n)));
  const float s = most < bound ? most : bound;  // std::min(bound, max)
  *scaler = terngrad::Scaler{bound, s};
  *header = s;
}

// One thread per element; the codes of 16 elements are OR-ed across lanes into a word.
template <bool kFeedback>
__global__ void encodeCodes(const float* __restrict__ g, float* __restrict__ r,
                            uint32_t* __restrict__ words_out, size_t n, size_t words,
                            const terngrad::Scaler* __restrict__ scaler, uint64_t stream,
                            const DeviceFault* fault) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (faulted(fault)) return;  // the same for every thread: whole warps leave together
  uint32_t code = 0;
  if (i < n) code = terngrad::encodeElement<kFeedback>(g, r, i, *scaler, stream);
  const uint32_t word = orOverLanes(code << (terngrad::shiftOf(i) + byteShift(i >> 2)), 16);
  if (i % 16 == 0 && i / 16 < words) words_out[i / 16] = word;
}

// s first, then the codes, as the CPU codec checks them.
__global__ void checkEncoded(const float* __restrict__ header, const uint8_t* __restrict__ codes,
                             size_t n, size_t code_bytes, DeviceFault* fault) {
  const size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (k == 0) {
    const float s = *header;
    if (!isfinite(s) || s < 0.0f) {
      fault->value = s;
      raiseFault(fault, kFaultBadScale, 0);
    }
  }
  if (k >= code_bytes) return;
  const uint32_t c = codes[k];
  const bool low_only = (c & ~(c >> 1) & 0x55u) != 0;
  uint32_t padding = 0;
  if (4 * k >= n) padding = c;
  else if (k == n / 4 && n % 4 != 0) padding = c & (0xffu >> (2 * (n % 4)));
  if (low_only || padding != 0) raiseFault(fault, kFaultBadCode, 0);
}

__global__ void decodeCodes(const float* __restrict__ header, const uint8_t* __restrict__ codes,
                            float* __restrict__ acc, size_t n, const DeviceFault* fault) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n || faulted(fault)) return;
  acc[i] += terngrad::dequantize((codes[i >> 2] >> terngrad::shiftOf(i)) & 3u, *header);
}

class GpuTerngradCodec final : public FaultingGpuCodec {
 public:
  GpuTerngradCodec(bool clip, uint64_t seed, bool error_feedback)
      : clip_(clip), seed_(seed), error_feedback_(error_feedback) {}

  std::string_view name() const override { return "terngrad"; }
  size_t stateElements(size_t n) const override { return error_feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return terngrad::encodedBytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id, GpuStream stream) override {
    const size_t n = in.size();
    const size_t bytes = terngrad::encodedBytes(n);
    GC_RETURN_IF_ERROR(
        checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), bytes));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    const size_t runs = (n + kBlock - 1) / kBlock;
    if (squares_.size() < runs + 1) {
      GC_ASSIGN_OR_RETURN(squares_, DeviceBuffer<double>::allocate(runs + 1));
      GC_ASSIGN_OR_RETURN(largest_, DeviceBuffer<float>::allocate(runs + 1));
    }
    if (scaler_.size() == 0) {
      GC_ASSIGN_OR_RETURN(scaler_, DeviceBuffer<terngrad::Scaler>::allocate(1));
    }
    const cudaStream_t s = toCuda(stream);
    auto* header = reinterpret_cast<float*>(out.data());
    auto* codes = reinterpret_cast<uint32_t*>(out.data() + terngrad::kHeaderBytes);
    const size_t words = (bytes - terngrad::kHeaderBytes) / 4;
    const uint64_t rng_stream = rng::streamSeed(seed_, id.key, id.slice, id.step);
    const float* g = in.data();
    float* r = error_feedback_ ? state.data() : nullptr;
    double* total = squares_.data() + runs;
    if (runs != 0) {
      if (error_feedback_) {
        statRuns<true><<<static_cast<unsigned>(runs), kStageThreads, 0, s>>>(g, r, n, squares_.data(), largest_.data());
      } else {
        statRuns<false><<<static_cast<unsigned>(runs), kStageThreads, 0, s>>>(g, r, n, squares_.data(), largest_.data());
      }
      sumInOrder<<<1, 1024, 0, s>>>(squares_.data(), runs, total);
    }
    finishScaler<<<1, kStageThreads, 0, s>>>(total, largest_.data(), runs, n, clip_, error_feedback_,
                                             scaler_.data(), header, fault());
    if (words != 0) {
      if (error_feedback_) {
        encodeCodes<true><<<blocksFor(16 * words), kThreads, 0, s>>>(g, r, codes, n, words,
                                                                     scaler_.data(), rng_stream, fault());
      } else {
        encodeCodes<false><<<blocksFor(16 * words), kThreads, 0, s>>>(g, r, codes, n, words,
                                                                      scaler_.data(), rng_stream, fault());
      }
    }
    GC_RETURN_IF_ERROR(launched(name()));
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&,
                   GpuStream stream) override {
    const size_t n = acc.size();
    const size_t bytes = terngrad::encodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), bytes));
    GC_RETURN_IF_ERROR(checkAligned(name(), in.data(), "encoded"));
    const auto* header = reinterpret_cast<const float*>(in.data());
    const auto* codes = reinterpret_cast<const uint8_t*>(in.data() + terngrad::kHeaderBytes);
    const size_t code_bytes = bytes - terngrad::kHeaderBytes;
    const cudaStream_t s = toCuda(stream);
    checkEncoded<<<blocksFor(std::max<size_t>(code_bytes, 1)), kThreads, 0, s>>>(header, codes, n,
                                                                                 code_bytes, fault());
    if (n != 0) decodeCodes<<<blocksFor(n), kThreads, 0, s>>>(header, codes, acc.data(), n, fault());
    return launched(name());
  }

  Status init() { return initFaults(); }

 protected:
  Status describe(const DeviceFault& f) const override {
    switch (faultKind(f)) {
      case kFaultNonFinite:
        return Status::invalidArgument(strCat("terngrad: ",
                                              faultIndex(f) != 0 ? "gradient plus residual" : "gradient",
                                              " holds a non-finite value"));
      case kFaultBadScale:
        return Status::dataLoss(strCat("terngrad: scaler is ", f.value, ", expected a finite value >= 0"));
      case kFaultBadCode:
        return Status::dataLoss(
            "terngrad: codes hold 0b01 or a non-zero padding code, which the encoder never writes");
      default:
        return FaultingGpuCodec::describe(f);
    }
  }

 private:
  bool clip_;
  uint64_t seed_;
  bool error_feedback_;
  DeviceBuffer<double> squares_;
  DeviceBuffer<float> largest_;
  DeviceBuffer<terngrad::Scaler> scaler_;
};

}  // namespace

Result<std::unique_ptr<GpuCodec>> makeGpuTerngrad(const Params& params) {
  ParamReader reader("terngrad", params);
  const bool clip = reader.boolean("clip", true);
  const uint64_t seed = reader.seed("seed", 0);
  const bool error_feedback = reader.boolean("error_feedback", false);
  GC_RETURN_IF_ERROR(reader.finish());
  auto codec = std::make_unique<GpuTerngradCodec>(clip, seed, error_feedback);
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

}  // namespace gcagent::compress::cuda

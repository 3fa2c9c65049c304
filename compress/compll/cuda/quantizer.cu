// Every codec definition's GPU codec (a selecting definition's: cuda/selector.cuh). A
// quantizer's: the definition's element math (ScalarLanes) in one
// thread per element, neighbouring threads reading neighbouring floats. The codes of a
// 32-bit word are OR-ed together across the warp's lanes and stored whole; threads past the
// last element add zero codes, the padding of the last word. A scaled definition's scale is
// made on the device from the slice statistics, in slice_stats.h's order (stats.cuh), so it
// has the CPU's bits, and the kernels read it from the encoding's header: nothing waits for
// the host.
#include <memory>

#include "compress/compll/definitions.h"
#include "compress/compll/cuda/selector.cuh"
#include "compress/compll/gpu_quantizer.h"
#include "compress/cuda/launch.cuh"
#include "compress/cuda/stats.cuh"

namespace gcagent::compress::compll {
namespace {

using compress::cuda::DeviceBuffer;
using compress::cuda::DeviceFault;
using compress::cuda::FaultingGpuCodec;
using compress::cuda::GpuCodec;
using compress::cuda::GpuStream;
using compress::cuda::faulted;
using compress::cuda::raiseFault;

__device__ __forceinline__ size_t threadIndex() { return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; }

template <class Def>
__device__ __forceinline__ uint32_t encodeElement(float g, float& r, const typename Def::Params& p, float scale,
                                                  uint64_t stream, size_t i) {
  const ScalarLanes l;
  if constexpr (kTakesScale<Def> && Stochastic<Def>) {
    return Def::encode(l, g, r, p, scale, takesDraws<Def>(p) ? rng::uniform01(stream, i) : 0.0f);
  } else if constexpr (kTakesScale<Def>) {
    return Def::encode(l, g, r, p, scale);
  } else if constexpr (Stochastic<Def>) {
    return Def::encode(l, g, r, p, takesDraws<Def>(p) ? rng::uniform01(stream, i) : 0.0f);
  } else {
    return Def::encode(l, g, r, p);
  }
}

template <class Def>
__device__ __forceinline__ float decodeElement(uint32_t code, const typename Def::Params& p, float scale) {
  if constexpr (kTakesScale<Def>) {
    return Def::decode(ScalarLanes{}, code, p, scale);
  } else {
    return Def::decode(ScalarLanes{}, code, p);
  }
}

// One thread block per kStatsBlock elements: the block's statistics, each in the CPU's four
// lanes (threads 0-3 the magnitudes, 4-7 the squares, 8-11 the maxima). Without a residual
// (r null) x is g + 0, as the encoder sees it.
__global__ void blockStatsKernel(const float* __restrict__ g, const float* __restrict__ r, size_t n,
                                 SliceStats* __restrict__ out) {
  __shared__ float x[kStatsBlock];
  __shared__ double sums[8];
  __shared__ float maxima[4];
  const size_t begin = blockIdx.x * kStatsBlock;
  const size_t count = compress::cuda::smaller(kStatsBlock, n - begin);
  for (size_t k = threadIdx.x; k < count; k += blockDim.x) x[k] = g[begin + k] + (r != nullptr ? r[begin + k] : 0.0f);
  __syncthreads();
  const uint32_t lane = threadIdx.x % 4;
  if (threadIdx.x < 4) {
    sums[lane] = compress::cuda::laneSum(0, count, lane, [&](size_t k) { return static_cast<double>(fabsf(x[k])); });
  } else if (threadIdx.x < 8) {
    sums[4 + lane] = compress::cuda::laneSum(0, count, lane, [&](size_t k) {
      const double v = x[k];
      return __dmul_rn(v, v);  // never fused into the sum: the CPU rounds the square first
    });
  } else if (threadIdx.x < 12) {
    float m = 0.0f;
    for (size_t k = lane; k < count; k += 4) m = fmaxf(m, fabsf(x[k]));
    maxima[lane] = m;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    SliceStats s;
    s.sum_abs = compress::cuda::combineLanes(sums);
    s.sum_squares = compress::cuda::combineLanes(sums + 4);
    s.max_abs = fmaxf(fmaxf(maxima[0], maxima[1]), fmaxf(maxima[2], maxima[3]));
    out[blockIdx.x] = s;
  }
}

// The blocks' statistics combined in block order by one thread, staged in shared memory in
// chunks; then the definition's scale into the header, or a fault for a non-finite x.
template <class Def>
__global__ void scaleKernel(const SliceStats* __restrict__ blocks, size_t count, size_t n, typename Def::Params p,
                            float* __restrict__ header, DeviceFault* fault) {
  constexpr size_t kChunk = 512;
  __shared__ SliceStats chunk[kChunk];
  SliceStats total;
  for (size_t base = 0; base < count; base += kChunk) {
    const size_t here = count - base < kChunk ? count - base : kChunk;
    for (size_t k = threadIdx.x; k < here; k += blockDim.x) chunk[k] = blocks[base + k];
    __syncthreads();
    if (threadIdx.x == 0) {
      const SliceStats part = combineBlocks(chunk, here);
      total.sum_abs += part.sum_abs;
      total.sum_squares += part.sum_squares;
      total.max_abs = fmaxf(total.max_abs, part.max_abs);
    }
    __syncthreads();
  }
  if (threadIdx.x != 0 || faulted(fault)) return;
  if (!isfinite(total.sum_abs) || !isfinite(total.sum_squares)) {
    raiseFault(fault, compress::cuda::kFaultNonFinite, 0);
    return;
  }
  *header = Def::scale(total, n, p);
}

template <class Def>
__global__ void fixedScaleKernel(size_t n, typename Def::Params p, float* header, const DeviceFault* fault) {
  if (!faulted(fault)) *header = Def::scale(SliceStats{}, n, p);
}

template <class Def, bool kFeedback>
__global__ void encodeKernel(const float* __restrict__ g, float* __restrict__ r, uint32_t* __restrict__ out,
                             size_t n, size_t words, typename Def::Params p, const float* __restrict__ header,
                             uint64_t stream, const DeviceFault* fault) {
  using C = typename Def::Codes;
  const size_t i = threadIndex();
  if (header != nullptr && faulted(fault)) return;  // the same for every thread: whole warps leave together
  const float scale = header != nullptr ? *header : 1.0f;
  // No early exit: every lane of a warp takes part in the shuffles.
  uint32_t code = 0;
  if (i < n) {
    float ri = kFeedback ? r[i] : 0.0f;
    code = encodeElement<Def>(g[i], ri, p, scale, stream, i);
    if constexpr (kFeedback) r[i] = ri;
  }
  const uint32_t word = compress::cuda::orOverLanes(
      code << (C::shift(i) + compress::cuda::byteShift(i / C::kPerByte)), C::kPerWord);
  if (i % C::kPerWord == 0 && i / C::kPerWord < words) out[i / C::kPerWord] = word;
}

// What the CPU codec checks before decoding, in its order: the scale, then the padding.
template <class Def>
__global__ void checkKernel(const float* __restrict__ header, const uint8_t* __restrict__ codes, size_t n,
                            DeviceFault* fault) {
  using C = typename Def::Codes;
  const size_t t = threadIndex();
  if (t == 0 && header != nullptr) {
    const float scale = *header;
    if (!isfinite(scale) || scale < 0.0f) {
      fault->value = scale;
      raiseFault(fault, compress::cuda::kFaultBadScale, 0);
    }
  }
  if constexpr (kPaddingChecked<Def>) {
    const size_t b = n / C::kPerByte + t;  // bytes holding codes past element n-1
    if (b < C::bytes(n)) {
      const uint32_t mask = (b == n / C::kPerByte && n % C::kPerByte != 0) ? (1u << C::shift(n - 1)) - 1u : 0xffu;
      if ((codes[b] & mask) != 0) raiseFault(fault, compress::cuda::kFaultBadPadding, n);
    }
  }
  if constexpr (kChecksCodes<Def>) {
    // One thread per element: the lowest index wins, the one the CPU names.
    if (t < n && C::at(codes, t) == Def::kNeverWritten) raiseFault(fault, compress::cuda::kFaultBadCode, t);
  }
}

template <class Def>
__global__ void decodeAddKernel(const uint8_t* __restrict__ codes, float* __restrict__ acc, size_t n,
                                typename Def::Params p, const float* __restrict__ header, const DeviceFault* fault) {
  const size_t i = threadIndex();
  if (i >= n || faulted(fault)) return;
  const float scale = header != nullptr ? *header : 1.0f;
  acc[i] += decodeElement<Def>(Def::Codes::at(codes, i), p, scale);
}

// Block-scaled definitions: one thread block per block of the definition, a thread per
// element of it (blockDim.x is the block size), in the CPU's order (cpu/quantizer-inl.h).

// x <- H x over the thread block's elements, v being this thread's; every thread calls it.
__device__ __forceinline__ float hadamard(float* shared, float v) {
  const uint32_t j = threadIdx.x;
  shared[j] = v;
  __syncthreads();
  for (uint32_t h = 1; h < blockDim.x; h *= 2) {
    if ((j & h) == 0) butterfly(shared, j, h);
    __syncthreads();
  }
  v = shared[j];
  __syncthreads();
  return v;
}

// This thread's x = g + r (0 past the slice's end), rotated when the definition rotates.
template <class Def, bool kFeedback>
__device__ __forceinline__ float blockX(const float* g, const float* r, size_t n, const typename Def::Params& p,
                                        uint64_t stream, float* shared) {
  const size_t i = threadIndex();
  const float x = i < n ? g[i] + (kFeedback ? r[i] : 0.0f) : 0.0f;
  if (!rotates<Def>(p)) return x;
  return hadamard(shared, floatOf(bitsOf(x) ^ rotationSign(stream, i)));
}

// The rotation turned back: D H v / size.
__device__ __forceinline__ float rotatedBack(float* shared, float v, uint64_t stream) {
  v = hadamard(shared, v);
  return floatOf(bitsOf(v * (1.0f / static_cast<float>(blockDim.x))) ^ rotationSign(stream, threadIndex()));
}

// The largest of v over the thread block; every thread calls it.
__device__ __forceinline__ uint32_t blockMax(uint32_t v, uint32_t* warp_max) {
  for (unsigned offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  uint32_t m = 0;
  for (uint32_t w = 0; w < blockDim.x / 32; ++w) m = max(m, warp_max[w]);
  return m;
}

template <class Def, bool kFeedback>
__global__ void blockScalesKernel(const float* __restrict__ g, const float* __restrict__ r, size_t n,
                                  typename Def::Params p, uint64_t stream, uint8_t* __restrict__ scales,
                                  DeviceFault* fault) {
  __shared__ float shared[kMaxBlock];
  __shared__ uint32_t warp_max[kMaxBlock / 32];
  const float x = blockX<Def, kFeedback>(g, r, n, p, stream, shared);
  const uint32_t m = blockMax(bitsOf(x) & 0x7fffffffu, warp_max);
  if (threadIdx.x != 0) return;
  if (m >= 0x7f800000u) {
    raiseFault(fault, compress::cuda::kFaultNonFinite, blockIdx.x);
  } else {
    Def::Scale::store(scales + blockIdx.x * Def::Scale::kBytes, Def::blockScale(floatOf(m), p));
  }
}

template <class Def, bool kFeedback>
__global__ void blockEncodeKernel(const float* __restrict__ g, float* __restrict__ r, size_t n, size_t coded,
                                  typename Def::Params p, uint64_t stream, const uint8_t* __restrict__ scales,
                                  uint32_t* __restrict__ out, size_t words, const DeviceFault* fault) {
  using C = typename Def::Codes;
  __shared__ float shared[kMaxBlock];
  if (faulted(fault)) return;  // the same for every thread
  const size_t i = threadIndex();
  const float scale = Def::Scale::load(scales + blockIdx.x * Def::Scale::kBytes);
  const bool rotated = rotates<Def>(p);
  const float x = blockX<Def, kFeedback>(g, r, n, p, stream, shared);
  // Rotated, x is coded against a residual of 0 and the residual turned back; else g and r
  // go in as the CPU's loop hands them.
  float e = 0.0f;
  uint32_t code = 0;
  if (i < coded) {
    if (rotated) {
      code = encodeElement<Def>(x, e, p, scale, stream, i);
    } else {
      e = kFeedback ? r[i] : 0.0f;
      code = encodeElement<Def>(g[i], e, p, scale, stream, i);
    }
  }
  const uint32_t word = compress::cuda::orOverLanes(
      code << (C::shift(i) + compress::cuda::byteShift(i / C::kPerByte)), C::kPerWord);
  if (i % C::kPerWord == 0 && i / C::kPerWord < words) out[i / C::kPerWord] = word;
  if constexpr (kFeedback) {
    if (rotated) e = rotatedBack(shared, e, stream);
    if (i < n) r[i] = e;
  }
}

// Scales first (lowest block), then the codes the definition never writes (lowest element).
template <class Def>
__global__ void blockCheckKernel(const uint8_t* __restrict__ scales, const uint8_t* __restrict__ codes, size_t blocks,
                                 size_t coded, typename Def::Params p, DeviceFault* fault) {
  const size_t t = threadIndex();
  if (t < blocks && !Def::Scale::valid(scales + t * Def::Scale::kBytes)) {
    raiseFault(fault, compress::cuda::kFaultBadScale, t);
  }
  if constexpr (kChecksWritten<Def>) {
    const uint32_t mask = Def::unwrittenMask(p);
    if (t < coded && (Def::Codes::at(codes, t) & mask) == mask) raiseFault(fault, compress::cuda::kFaultBadCode, t);
  }
}

template <class Def>
__global__ void blockDecodeAddKernel(const uint8_t* __restrict__ scales, const uint8_t* __restrict__ codes,
                                     float* __restrict__ acc, size_t n, size_t coded, typename Def::Params p,
                                     uint64_t stream, const DeviceFault* fault) {
  __shared__ float shared[kMaxBlock];
  if (faulted(fault)) return;  // the same for every thread
  const size_t i = threadIndex();
  const float scale = Def::Scale::load(scales + blockIdx.x * Def::Scale::kBytes);
  float v = i < coded ? decodeElement<Def>(Def::Codes::at(codes, i), p, scale) : 0.0f;
  if (rotates<Def>(p)) v = rotatedBack(shared, v, stream);
  if (i < n) acc[i] += v;
}

template <class Def>
class GpuBlockQuantizer final : public FaultingGpuCodec {
  using C = typename Def::Codes;
  using S = typename Def::Scale;

 public:
  GpuBlockQuantizer(typename Def::Params p, bool feedback) : p_(p), feedback_(feedback) {}

  std::string_view name() const override { return Def::kName; }
  size_t stateElements(size_t n) const override { return feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return scaleBytes<S>(blocks(n)) + C::bytes(codedElements<Def>(n, p_)); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id, GpuStream stream) override {
    const size_t n = in.size();
    const size_t bytes = maxEncodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), bytes));
    GC_RETURN_IF_ERROR(compress::cuda::checkAligned(name(), out.data(), "output"));
    const auto s = compress::cuda::toCuda(stream);
    auto* scales = reinterpret_cast<uint8_t*>(out.data());
    const size_t scale_bytes = scaleBytes<S>(blocks(n));
    // The scales' padding: zero, as the CPU writes it.
    if (scale_bytes > blocks(n) * S::kBytes) {
      const cudaError_t err = cudaMemsetAsync(scales + blocks(n) * S::kBytes, 0, scale_bytes - blocks(n) * S::kBytes, s);
      if (err != cudaSuccess)
        return Status::unavailable(strCat(name(), ": gpu memset failed: ", cudaGetErrorString(err)));
    }
    if (n == 0) return bytes;
    const uint64_t draws = streamOf(id);
    const auto grid = static_cast<unsigned>(blocks(n));
    const unsigned threads = Def::block(p_);
    auto* words = reinterpret_cast<uint32_t*>(out.data() + scale_bytes);
    const size_t coded = codedElements<Def>(n, p_);
    if (feedback_) {
      blockScalesKernel<Def, true><<<grid, threads, 0, s>>>(in.data(), state.data(), n, p_, draws, scales, fault());
      blockEncodeKernel<Def, true><<<grid, threads, 0, s>>>(in.data(), state.data(), n, coded, p_, draws, scales,
                                                            words, C::bytes(coded) / 4, fault());
    } else {
      blockScalesKernel<Def, false><<<grid, threads, 0, s>>>(in.data(), nullptr, n, p_, draws, scales, fault());
      blockEncodeKernel<Def, false><<<grid, threads, 0, s>>>(in.data(), nullptr, n, coded, p_, draws, scales, words,
                                                             C::bytes(coded) / 4, fault());
    }
    GC_RETURN_IF_ERROR(compress::cuda::launched(name()));
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId& id,
                   GpuStream stream) override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), maxEncodedBytes(n)));
    if (n == 0) return {};
    const auto s = compress::cuda::toCuda(stream);
    const auto* scales = reinterpret_cast<const uint8_t*>(in.data());
    const auto* codes = scales + scaleBytes<S>(blocks(n));
    const size_t coded = codedElements<Def>(n, p_);
    blockCheckKernel<Def><<<compress::cuda::blocksFor(coded), compress::cuda::kThreads, 0, s>>>(
        scales, codes, blocks(n), coded, p_, fault());
    if constexpr (kPaddingChecked<Def> || kChecksCodes<Def>) {
      checkKernel<Def><<<compress::cuda::blocksFor(coded), compress::cuda::kThreads, 0, s>>>(nullptr, codes, coded,
                                                                                             fault());
    }
    blockDecodeAddKernel<Def><<<static_cast<unsigned>(blocks(n)), Def::block(p_), 0, s>>>(
        scales, codes, acc.data(), n, coded, p_, streamOf(id), fault());
    return compress::cuda::launched(name());
  }

  Status init() { return initFaults(); }

 protected:
  Status describe(const DeviceFault& f) const override {
    const uint64_t index = compress::cuda::faultIndex(f);
    switch (compress::cuda::faultKind(f)) {
      case compress::cuda::kFaultNonFinite:
        return Status::invalidArgument(strCat(name(), ": block ", index, " of the ",
                                              feedback_ ? "gradient plus residual" : "gradient",
                                              " holds a non-finite value"));
      case compress::cuda::kFaultBadScale:
        return Status::dataLoss(strCat(name(), ": block ", index, " has a scale the encoder never writes"));
      case compress::cuda::kFaultBadPadding:
        return Status::dataLoss(strCat(name(), ": padding bits past element ", index, " are set"));
      case compress::cuda::kFaultBadCode:
        return Status::dataLoss(strCat(name(), ": element ", index, " has a code the encoder never writes"));
      default:
        return FaultingGpuCodec::describe(f);
    }
  }

 private:
  size_t blocks(size_t n) const { return (n + Def::block(p_) - 1) / Def::block(p_); }
  uint64_t streamOf(const SliceId& id) const { return compll::streamOf<Def>(p_, id.key, id.slice, id.step); }

  typename Def::Params p_;
  bool feedback_;
};

template <class Def>
class GpuQuantizer final : public FaultingGpuCodec {
  using C = typename Def::Codes;
  static constexpr size_t kHeader = kHeaderBytes<Def>;

 public:
  GpuQuantizer(typename Def::Params p, bool feedback) : p_(p), feedback_(feedback) {}

  std::string_view name() const override { return Def::kName; }
  size_t stateElements(size_t n) const override { return feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return kHeader + C::bytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id, GpuStream stream) override {
    const size_t n = in.size();
    const size_t bytes = maxEncodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), bytes));
    GC_RETURN_IF_ERROR(compress::cuda::checkAligned(name(), out.data(), "output"));
    const auto s = compress::cuda::toCuda(stream);
    float* header = nullptr;
    if constexpr (Scaled<Def>) {
      header = reinterpret_cast<float*>(out.data());
      GC_RETURN_IF_ERROR(launchScale(in.data(), state.data(), n, header, s));
    }
    if (n == 0) {
      GC_RETURN_IF_ERROR(compress::cuda::launched(name()));
      return bytes;
    }
    const uint64_t draws = compll::streamOf<Def>(p_, id.key, id.slice, id.step);
    auto* dst = reinterpret_cast<uint32_t*>(out.data() + kHeader);
    const size_t words = C::bytes(n) / 4;
    const unsigned blocks = compress::cuda::blocksFor(C::kPerWord * words);
    if (feedback_) {
      encodeKernel<Def, true><<<blocks, compress::cuda::kThreads, 0, s>>>(in.data(), state.data(), dst, n, words, p_,
                                                                          header, draws, fault());
    } else {
      encodeKernel<Def, false><<<blocks, compress::cuda::kThreads, 0, s>>>(in.data(), nullptr, dst, n, words, p_,
                                                                           header, draws, fault());
    }
    GC_RETURN_IF_ERROR(compress::cuda::launched(name()));
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&,
                   GpuStream stream) override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), maxEncodedBytes(n)));
    const auto s = compress::cuda::toCuda(stream);
    const float* header = nullptr;
    if constexpr (Scaled<Def>) {
      GC_RETURN_IF_ERROR(compress::cuda::checkAligned(name(), in.data(), "encoded"));
      header = reinterpret_cast<const float*>(in.data());
    }
    const auto* codes = reinterpret_cast<const uint8_t*>(in.data() + kHeader);
    if (Scaled<Def> || kPaddingChecked<Def> || kChecksCodes<Def>) {
      size_t checked = kPaddingChecked<Def> ? C::bytes(n) - n / C::kPerByte : 1;
      if (kChecksCodes<Def> && n > checked) checked = n;
      checkKernel<Def><<<compress::cuda::blocksFor(checked), compress::cuda::kThreads, 0, s>>>(header, codes, n,
                                                                                                 fault());
    }
    if (n != 0) {
      decodeAddKernel<Def><<<compress::cuda::blocksFor(n), compress::cuda::kThreads, 0, s>>>(codes, acc.data(), n, p_,
                                                                                              header, fault());
    }
    return compress::cuda::launched(name());
  }

  Status init() { return initFaults(); }

 protected:
  Status describe(const DeviceFault& f) const override {
    switch (compress::cuda::faultKind(f)) {
      case compress::cuda::kFaultNonFinite:
        return Status::invalidArgument(
            strCat(name(), ": ", feedback_ ? "gradient plus residual" : "gradient", " holds a non-finite value"));
      case compress::cuda::kFaultBadScale:
        return Status::dataLoss(strCat(name(), ": scale is ", f.value, ", expected a finite value >= 0"));
      case compress::cuda::kFaultBadPadding:
        return Status::dataLoss(strCat(name(), ": padding bits past element ", compress::cuda::faultIndex(f), " are set"));
      case compress::cuda::kFaultBadCode:
        return Status::dataLoss(strCat(name(), ": element ", compress::cuda::faultIndex(f), " has code ",
                                       kNeverWrittenOf(), ", which the encoder never writes"));
      default:
        return FaultingGpuCodec::describe(f);
    }
  }

 private:
  static uint32_t kNeverWrittenOf() {
    if constexpr (kChecksCodes<Def>) {
      return Def::kNeverWritten;
    } else {
      return 0;
    }
  }

  // The slice's scale into the header, made from its statistics when the definition asks.
  Status launchScale(const float* g, const float* r, size_t n, float* header, cudaStream_t s) {
    const unsigned which = Def::stats(p_);
    if (which == 0 || n == 0) {
      fixedScaleKernel<Def><<<1, 1, 0, s>>>(n, p_, header, fault());
      return {};
    }
    const size_t count = (n + kStatsBlock - 1) / kStatsBlock;
    if (blocks_.size() < count) {
      GC_ASSIGN_OR_RETURN(blocks_, DeviceBuffer<SliceStats>::allocate(count));
    }
    blockStatsKernel<<<static_cast<unsigned>(count), compress::cuda::kStageThreads, 0, s>>>(
        g, feedback_ ? r : nullptr, n, blocks_.data());
    scaleKernel<Def><<<1, 512, 0, s>>>(blocks_.data(), count, n, p_, header, fault());
    return {};
  }

  typename Def::Params p_;
  bool feedback_;
  DeviceBuffer<SliceStats> blocks_;  // one per kStatsBlock elements
};

template <class C>
Result<std::unique_ptr<GpuCodec>> initialized(std::unique_ptr<C> codec) {
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

}  // namespace

template <class Def>
Result<std::unique_ptr<GpuCodec>> makeGpuDefined(const Params& params) {
  ParamReader reader(Def::kName, params);
  const typename Def::Params p = Def::read(reader);
  const bool feedback = reader.boolean("error_feedback", feedbackByDefault<Def>());
  GC_RETURN_IF_ERROR(reader.finish());
  if constexpr (Selecting<Def>) {
    return initialized(std::make_unique<GpuSelector<Def>>(p, feedback));
  } else if constexpr (BlockScaled<Def>) {
    return initialized(std::make_unique<GpuBlockQuantizer<Def>>(p, feedback));
  } else {
    return initialized(std::make_unique<GpuQuantizer<Def>>(p, feedback));
  }
}

#define GC_INSTANTIATE(Def) \
  template Result<std::unique_ptr<GpuCodec>> makeGpuDefined<codecs::Def>(const Params& params);
GC_FOR_EACH_CODEC(GC_INSTANTIATE)
#undef GC_INSTANTIATE

}  // namespace gcagent::compress::compll

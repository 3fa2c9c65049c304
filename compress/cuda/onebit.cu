// onebit on the GPU (see compress/onebit/onebit.cc for the format). Per encode:
// the CPU's four-lane sums of |g + e| over 4096-element runs, the runs' sums added in order
// (so the scale has the CPU's bits), and one fused pass that writes the sign bits and the new
// residual.
#include <algorithm>
#include <memory>

#include "compress/cuda/codecs.h"
#include "compress/cuda/launch.cuh"
#include "compress/cuda/stats.cuh"
#include "compress/onebit/onebit_math.h"
#include "compress/params.h"

namespace gcagent::compress::cuda {
namespace {

constexpr size_t kBlock = 4096;  // as the CPU codec: the scale's summation order depends on it

// One thread block per run of kBlock elements: the run's sum of |g + e|.
__global__ void absRunSums(const float* __restrict__ g, const float* __restrict__ e, size_t n,
                           double* __restrict__ runs) {
  __shared__ float staged[kBlock];
  const size_t begin = blockIdx.x * kBlock;
  const size_t count = smaller(kBlock, n - begin);
  for (size_t k = threadIdx.x; k < count; k += blockDim.x)
    staged[k] = onebit::magnitude(g[begin + k] + e[begin + k]);
  const double sum = stagedRunSum(staged, count, [](float v) { return static_cast<double>(v); });
  if (threadIdx.x == 0) runs[blockIdx.x] = sum;
}

__global__ void finishScale(const double* __restrict__ total, size_t n, float* __restrict__ header,
                            DeviceFault* fault) {
  if (faulted(fault)) return;
  const double sum = *total;
  if (!isfinite(sum)) {
    raiseFault(fault, kFaultNonFinite, 0);
    return;
  }
  *header = static_cast<float>(sum / static_cast<double>(n));
}

// One thread per element; the sign bits of 32 elements are OR-ed across the warp into a word.
__global__ void encodeBits(const float* __restrict__ g, float* __restrict__ e,
                           uint32_t* __restrict__ words_out, size_t n, size_t words,
                           const float* __restrict__ header, const DeviceFault* fault) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (faulted(fault)) return;  // the same for every thread: whole warps leave together
  const float scale = *header;
  uint32_t negative = 0;
  if (i < n) {
    const float x = g[i] + e[i];
    negative = static_cast<uint32_t>(x < 0.0f);
    e[i] = x - onebit::dequantize(negative, scale);
  }
  const uint32_t word = orOverLanes((negative << (7u - static_cast<uint32_t>(i & 7u))) << byteShift(i >> 3), 32);
  if (i % 32 == 0 && i / 32 < words) words_out[i / 32] = word;
}

// Scale first, then padding, as the CPU codec checks them.
__global__ void checkEncoded(const float* __restrict__ header, const uint8_t* __restrict__ bits,
                             size_t n, size_t bit_bytes, DeviceFault* fault) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (t == 0) {
    const float scale = *header;
    if (!isfinite(scale) || scale < 0.0f) {
      fault->value = scale;
      raiseFault(fault, kFaultBadScale, 0);
    }
  }
  const size_t b = n / 8 + t;  // bytes holding bits past element n-1
  if (b >= bit_bytes) return;
  const uint32_t pad_mask = b == n / 8 ? (0xffu >> (n % 8)) : 0xffu;
  if ((bits[b] & pad_mask) != 0) raiseFault(fault, kFaultBadPadding, n);
}

__global__ void decodeBits(const float* __restrict__ header, const uint8_t* __restrict__ bits,
                           float* __restrict__ acc, size_t n, const DeviceFault* fault) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n || faulted(fault)) return;
  acc[i] += onebit::dequantize(onebit::bitAt(bits, i), *header);
}

__global__ void storeScale(float* header, float scale, const DeviceFault* fault) {
  if (!faulted(fault)) *header = scale;
}

class GpuOnebitCodec final : public FaultingGpuCodec {
 public:
  explicit GpuOnebitCodec(bool scaled) : scaled_(scaled) {}

  std::string_view name() const override { return "onebit"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return onebit::encodedBytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId&, GpuStream stream) override {
    const size_t n = in.size();
    const size_t bytes = onebit::encodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), bytes));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    auto* header = reinterpret_cast<float*>(out.data());
    const cudaStream_t s = toCuda(stream);
    if (n == 0) {
      storeScale<<<1, 1, 0, s>>>(header, scaled_ ? 0.0f : 1.0f, fault());
      GC_RETURN_IF_ERROR(launched(name()));
      return bytes;
    }
    if (scaled_) {
      const size_t runs = (n + kBlock - 1) / kBlock;
      if (runs_.size() < runs + 1) {
        GC_ASSIGN_OR_RETURN(runs_, DeviceBuffer<double>::allocate(runs + 1));
      }
      double* total = runs_.data() + runs;
      absRunSums<<<static_cast<unsigned>(runs), kStageThreads, 0, s>>>(in.data(), state.data(), n, runs_.data());
      sumInOrder<<<1, 1024, 0, s>>>(runs_.data(), runs, total);
      finishScale<<<1, 1, 0, s>>>(total, n, header, fault());
    } else {
      storeScale<<<1, 1, 0, s>>>(header, 1.0f, fault());
    }
    const size_t bit_bytes = bytes - onebit::kHeaderBytes;
    encodeBits<<<blocksFor(8 * bit_bytes), kThreads, 0, s>>>(
        in.data(), state.data(), reinterpret_cast<uint32_t*>(out.data() + onebit::kHeaderBytes), n,
        bit_bytes / 4, header, fault());
    GC_RETURN_IF_ERROR(launched(name()));
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&,
                   GpuStream stream) override {
    const size_t n = acc.size();
    const size_t bytes = onebit::encodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), bytes));
    GC_RETURN_IF_ERROR(checkAligned(name(), in.data(), "encoded"));
    const auto* header = reinterpret_cast<const float*>(in.data());
    const auto* bits = reinterpret_cast<const uint8_t*>(in.data() + onebit::kHeaderBytes);
    const size_t bit_bytes = bytes - onebit::kHeaderBytes;
    const cudaStream_t s = toCuda(stream);
    checkEncoded<<<blocksFor(bit_bytes - n / 8 + 1), kThreads, 0, s>>>(header, bits, n, bit_bytes,
                                                                        fault());
    if (n != 0) decodeBits<<<blocksFor(n), kThreads, 0, s>>>(header, bits, acc.data(), n, fault());
    return launched(name());
  }

  Status init() { return initFaults(); }

 protected:
  Status describe(const DeviceFault& f) const override {
    switch (faultKind(f)) {
      case kFaultNonFinite:
        return Status::invalidArgument("onebit: gradient plus residual holds a non-finite value");
      case kFaultBadScale:
        return Status::dataLoss(strCat("onebit: scale is ", f.value, ", expected a finite value >= 0"));
      case kFaultBadPadding:
        return Status::dataLoss(strCat("onebit: padding bits past element ", faultIndex(f), " are set"));
      default:
        return FaultingGpuCodec::describe(f);
    }
  }

 private:
  bool scaled_;
  DeviceBuffer<double> runs_;  // one sum per run, then the total
};

}  // namespace

Result<std::unique_ptr<GpuCodec>> makeGpuOnebit(const Params& params) {
  ParamReader reader("onebit", params);
  const bool scaled = reader.boolean("scaled", true);
  GC_RETURN_IF_ERROR(reader.finish());
  auto codec = std::make_unique<GpuOnebitCodec>(scaled);
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

}  // namespace gcagent::compress::cuda

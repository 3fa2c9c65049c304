// qsgd on the GPU (see compress/qsgd/qsgd.cc for the format). Per encode: four-lane sums of
// x^2 per bucket (the CPU's order, so every norm has the same bits), one thread per bucket
// turning its lanes into the norm in the header, and one fused pass drawing each level from
// the shared counter-based generator and updating the residual.
#include <algorithm>
#include <cmath>
#include <memory>

#include "compress/cuda/codecs.h"
#include "compress/cuda/launch.cuh"
#include "compress/cuda/stats.cuh"
#include "compress/params.h"
#include "compress/qsgd/qsgd_math.h"
#include "compress/random_math.h"

namespace gcagent::compress::cuda {
namespace {

template <bool kFeedback>
__global__ void squareLanes(const float* __restrict__ g, const float* __restrict__ r, size_t n,
                            size_t bucket, double* __restrict__ lanes) {
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t k = t / 4;
  if (k * bucket >= n) return;
  lanes[t] = laneSum(k * bucket, smaller(n, (k + 1) * bucket), static_cast<uint32_t>(t % 4),
                     [&](size_t i) {
                       const double x = inputAt<kFeedback>(g, r, i);
                       return x * x;
                     });
}

__global__ void finishNorms(const double* __restrict__ lanes, size_t buckets,
                            float* __restrict__ norms, DeviceFault* fault) {
  const size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (k >= buckets) return;
  const float norm = static_cast<float>(sqrt(combineLanes(lanes + 4 * k)));
  norms[k] = norm;
  if (!isfinite(norm)) raiseFault(fault, kFaultNonFinite, k);
}

template <bool kFeedback>
__global__ void encodeLevels(const float* __restrict__ g, float* __restrict__ r,
                             const float* __restrict__ norms, int8_t* __restrict__ level, size_t n,
                             size_t bucket, int32_t levels, uint64_t stream, const DeviceFault* fault) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n || faulted(fault)) return;
  const float norm = norms[i / bucket];
  level[i] = qsgd::encodeElement<kFeedback>(g, r, i, norm, qsgd::unitOf(norm, levels), levels, stream);
}

// int8: one thread per block takes its largest magnitude (integer max of the bits: exact in
// any order, as on the CPU).
template <bool kFeedback>
__global__ void maxMagnitudes(const float* __restrict__ g, const float* __restrict__ r, size_t n, size_t bucket,
                              size_t buckets, float* __restrict__ scales, DeviceFault* fault) {
  const size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (k >= buckets) return;
  uint32_t most = 0;
  for (size_t i = k * bucket, end = smaller(n, (k + 1) * bucket); i < end; ++i)
    most = max(most, qsgd::magnitudeBits(inputAt<kFeedback>(g, r, i)));
  scales[k] = floatOf(most);
  if (!isfinite(scales[k])) raiseFault(fault, kFaultNonFinite, k);
}

template <bool kFeedback>
__global__ void encodeNearestLevels(const float* __restrict__ g, float* __restrict__ r,
                                    const float* __restrict__ scales, int8_t* __restrict__ level, size_t n,
                                    size_t bucket, int32_t levels, const DeviceFault* fault) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n || faulted(fault)) return;
  const float scale = scales[i / bucket];
  level[i] = qsgd::encodeNearest<kFeedback>(g, r, i, scale, qsgd::unitOf(scale, levels), levels);
}

// Norms first, then levels, as the CPU codec checks them.
__global__ void checkEncoded(const float* __restrict__ norms, const int8_t* __restrict__ level,
                             size_t n, size_t buckets, int32_t levels, DeviceFault* fault) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < buckets && (!isfinite(norms[i]) || norms[i] < 0.0f)) raiseFault(fault, kFaultBadNorm, i);
  if (i < n && !qsgd::isValidLevel(level[i], levels)) raiseFault(fault, kFaultBadLevel, i);
}

// The offending value of the fault that won, for the message.
__global__ void recordFaultValue(const float* __restrict__ norms, const int8_t* __restrict__ level,
                                 DeviceFault* fault) {
  const unsigned long long key = fault->key;
  if (key == kNoFault) return;
  const size_t index = key & ((1ull << 48) - 1);
  if ((key >> 48) == kFaultBadNorm || (key >> 48) == kFaultNonFinite) fault->value = norms[index];
  if ((key >> 48) == kFaultBadLevel) fault->value = static_cast<float>(level[index]);
}

__global__ void decodeLevels(const float* __restrict__ norms, const int8_t* __restrict__ level,
                             float* __restrict__ acc, size_t n, size_t bucket, int32_t levels,
                             const DeviceFault* fault) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n || faulted(fault)) return;
  acc[i] += qsgd::dequantize(level[i], qsgd::unitOf(norms[i / bucket], levels));
}

// qsgd's L2 norm and random draw, or int8's largest magnitude and nearest rounding (qsgd.cc).
struct Flavor {
  std::string_view name;
  bool max_scale;
  bool stochastic;
};

class GpuQsgdCodec final : public FaultingGpuCodec {
 public:
  GpuQsgdCodec(Flavor flavor, int32_t levels, size_t bucket, uint64_t seed, bool error_feedback)
      : flavor_(flavor), levels_(levels), bucket_(bucket), seed_(seed), error_feedback_(error_feedback) {}

  std::string_view name() const override { return flavor_.name; }
  size_t stateElements(size_t n) const override { return error_feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return qsgd::encodedBytes(n, bucket_); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id, GpuStream stream) override {
    const size_t n = in.size();
    const size_t bytes = qsgd::encodedBytes(n, bucket_);
    GC_RETURN_IF_ERROR(
        checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), bytes));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    if (n == 0) return bytes;
    const size_t buckets = qsgd::bucketCount(n, bucket_);
    if (lanes_.size() < 4 * buckets) {
      GC_ASSIGN_OR_RETURN(lanes_, DeviceBuffer<double>::allocate(4 * buckets));
    }
    const cudaStream_t s = toCuda(stream);
    auto* norms = reinterpret_cast<float*>(out.data());
    auto* level = reinterpret_cast<int8_t*>(out.data() + 4 * buckets);
    const uint64_t rng_stream = rng::streamSeed(seed_, id.key, id.slice, id.step);
    const float* g = in.data();
    float* r = error_feedback_ ? state.data() : nullptr;
    if (flavor_.max_scale) {
      if (error_feedback_) {
        maxMagnitudes<true><<<blocksFor(buckets), kThreads, 0, s>>>(g, r, n, bucket_, buckets, norms, fault());
      } else {
        maxMagnitudes<false><<<blocksFor(buckets), kThreads, 0, s>>>(g, r, n, bucket_, buckets, norms, fault());
      }
    } else {
      if (error_feedback_) {
        squareLanes<true><<<blocksFor(4 * buckets), kThreads, 0, s>>>(g, r, n, bucket_, lanes_.data());
      } else {
        squareLanes<false><<<blocksFor(4 * buckets), kThreads, 0, s>>>(g, r, n, bucket_, lanes_.data());
      }
      finishNorms<<<blocksFor(buckets), kThreads, 0, s>>>(lanes_.data(), buckets, norms, fault());
    }
    recordFaultValue<<<1, 1, 0, s>>>(norms, nullptr, fault());
    if (!flavor_.stochastic) {
      if (error_feedback_) {
        encodeNearestLevels<true><<<blocksFor(n), kThreads, 0, s>>>(g, r, norms, level, n, bucket_, levels_, fault());
      } else {
        encodeNearestLevels<false><<<blocksFor(n), kThreads, 0, s>>>(g, r, norms, level, n, bucket_, levels_,
                                                                     fault());
      }
    } else if (error_feedback_) {
      encodeLevels<true><<<blocksFor(n), kThreads, 0, s>>>(g, r, norms, level, n, bucket_, levels_,
                                                           rng_stream, fault());
    } else {
      encodeLevels<false><<<blocksFor(n), kThreads, 0, s>>>(g, r, norms, level, n, bucket_, levels_,
                                                            rng_stream, fault());
    }
    GC_RETURN_IF_ERROR(launched(name()));
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&,
                   GpuStream stream) override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), qsgd::encodedBytes(n, bucket_)));
    GC_RETURN_IF_ERROR(checkAligned(name(), in.data(), "encoded"));
    if (n == 0) return {};
    const size_t buckets = qsgd::bucketCount(n, bucket_);
    const auto* norms = reinterpret_cast<const float*>(in.data());
    const auto* level = reinterpret_cast<const int8_t*>(in.data() + 4 * buckets);
    const cudaStream_t s = toCuda(stream);
    checkEncoded<<<blocksFor(n), kThreads, 0, s>>>(norms, level, n, buckets, levels_, fault());
    recordFaultValue<<<1, 1, 0, s>>>(norms, level, fault());
    decodeLevels<<<blocksFor(n), kThreads, 0, s>>>(norms, level, acc.data(), n, bucket_, levels_, fault());
    return launched(name());
  }

  Status init() { return initFaults(); }

 protected:
  Status describe(const DeviceFault& f) const override {
    switch (faultKind(f)) {
      case kFaultNonFinite:
        return Status::invalidArgument(
            flavor_.max_scale
                ? strCat(name(), ": block ", faultIndex(f), " has largest magnitude ", f.value,
                         ": the input must be finite")
                : strCat(name(), ": bucket ", faultIndex(f), " has L2 norm ", f.value,
                         ": the input must be finite and each bucket's norm must fit in fp32"));
      case kFaultBadNorm:
        return Status::dataLoss(strCat(name(), ": bucket ", faultIndex(f), " has norm ", f.value,
                                       ", expected a finite value >= 0"));
      case kFaultBadLevel:
        return Status::dataLoss(strCat(name(), ": element ", faultIndex(f), " has level ",
                                       static_cast<int>(f.value), ", outside [-", levels_, ", ",
                                       levels_, "]"));
      default:
        return FaultingGpuCodec::describe(f);
    }
  }

 private:
  Flavor flavor_;
  int32_t levels_;
  size_t bucket_;
  uint64_t seed_;
  bool error_feedback_;
  DeviceBuffer<double> lanes_;
};

}  // namespace

Result<std::unique_ptr<GpuCodec>> makeGpuQsgd(const Params& params) {
  ParamReader reader("qsgd", params);
  const int64_t levels = reader.integer("levels", qsgd::kMaxLevels, Range::closed(1, qsgd::kMaxLevels));
  const int64_t bucket = reader.integer("bucket", 512, Range::closed(1, 1 << 20));
  const uint64_t seed = reader.seed("seed", 0);
  const bool error_feedback = reader.boolean("error_feedback", false);
  GC_RETURN_IF_ERROR(reader.finish());
  auto codec = std::make_unique<GpuQsgdCodec>(Flavor{"qsgd", false, true}, static_cast<int32_t>(levels),
                                              static_cast<size_t>(bucket), seed, error_feedback);
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

Result<std::unique_ptr<GpuCodec>> makeGpuInt8(const Params& params) {
  ParamReader reader("int8", params);
  const int64_t block = reader.integer("block", 128, Range::closed(1, 1 << 20));
  const bool stochastic = reader.boolean("stochastic", false);
  const uint64_t seed = reader.seed("seed", 0);
  const bool error_feedback = reader.boolean("error_feedback", true);
  GC_RETURN_IF_ERROR(reader.finish());
  auto codec = std::make_unique<GpuQsgdCodec>(Flavor{"int8", true, stochastic}, qsgd::kMaxLevels,
                                              static_cast<size_t>(block), seed, error_feedback);
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

}  // namespace gcagent::compress::cuda

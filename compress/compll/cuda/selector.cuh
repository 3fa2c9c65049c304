// Every selecting definition's GPU codec (included by cuda/quantizer.cu): the definition's
// update (ScalarLanes) in one thread per element, then the selection of selection.h with the
// GPU's stages (compress/cuda/sparse_select.cuh): the sampled cut by a radix select, its
// lowering and the exact top-k decided on the device (an exact selection: the radix select of
// the k-th largest over the whole slice), the ordered compaction into pairs.
// Under a warm-up the counts are planned on the device from the encode count the slice's
// state records, so encode() never waits for the GPU. The same choices as the CPU's, bit for
// bit (scripts/test_gpu.sh). The encoded size varies: encode() returns the bound, and the
// exact size is 4 + 8 * the count in the first four bytes once finish() has returned.
#pragma once

#include <memory>

#include "compress/compll/definition.h"
#include "compress/cuda/device_buffer.h"
#include "compress/cuda/sparse_codec.cuh"

namespace gcagent::compress::compll {

template <class Def>
__global__ void updateKernel(const float* __restrict__ g, float* __restrict__ v, float* __restrict__ m, size_t n,
                             typename Def::Params p) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const ScalarLanes l;
  float vi = v[i];
  if constexpr (kKeepsMoment<Def>) {
    float mi = m[i];
    Def::update(l, g[i], vi, mi, p);
    m[i] = mi;
  } else {
    Def::update(l, g[i], vi, p);
  }
  v[i] = vi;
}

// The counts of this encode under the warm-up, from the encodes so far, which it advances.
enum : int { kPlanSampleRank = 0, kPlanK = 1, kPlanEnough = 2, kPlanMost = 3 };

__global__ inline void planWarmup(float* __restrict__ encodes, Selection s, double q, size_t n, size_t samples,
                                  compress::cuda::SelectState* st) {
  const auto t = static_cast<uint64_t>(*encodes);
  const Plan plan = planFor(keptFraction(s.kept, q, t, s.warmup), n, samples);
  st->plan[kPlanSampleRank] = plan.sample_rank;
  st->plan[kPlanK] = plan.k;
  st->plan[kPlanEnough] = enoughFor(plan.k);
  st->plan[kPlanMost] = mostPairs(plan.k);
  if (t < s.warmup) *encodes = static_cast<float>(t + 1);
}

template <class Def>
class GpuSelector final : public compress::cuda::GpuSparseCodec {
  static constexpr size_t kArrays = kKeepsMoment<Def> ? 2 : 1;
  using Count = compress::cuda::Count;

 public:
  GpuSelector(typename Def::Params p, bool feedback)
      : p_(p), s_(Def::selection(p)), feedback_(feedback), warming_(feedback && s_.warmup != 0),
        q_(warmupFactor(s_.kept, warming_ ? s_.warmup : 0)) {}

  std::string_view name() const override { return Def::kName; }
  size_t stateElements(size_t n) const override { return feedback_ ? kArrays * n + (warming_ ? 1 : 0) : 0; }
  size_t maxEncodedBytes(size_t n) const override { return sparse::bytesFor(mostSent(s_, n, warming_)); }
  bool isFixedSize() const override { return exact(s_); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id, compress::cuda::GpuStream stream) override {
    using namespace compress::cuda;
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), maxEncodedBytes(n)));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    const cudaStream_t s = toCuda(stream);
    if (n == 0) {
      cudaMemsetAsync(out.data(), 0, 4, s);
      GC_RETURN_IF_ERROR(launched(name()));
      return sparse::bytesFor(0);
    }
    const size_t samples = exact(s_) ? 0 : sparse::sampleCount(s_.sample, n);  // exact: a radix select of all
    GC_RETURN_IF_ERROR(reserve(n, samples));
    float* v = state.data();
    if (!feedback_) {  // each encode from a zeroed state of its own
      if (scratch_.size() < kArrays * n) {
        GC_ASSIGN_OR_RETURN(scratch_, DeviceBuffer<float>::allocate(kArrays * n));
      }
      v = scratch_.data();
      cudaMemsetAsync(v, 0, kArrays * n * sizeof(float), s);
    }
    float* m = kKeepsMoment<Def> ? v + n : nullptr;
    const Plan plan = planFor(s_.kept, n, samples);
    Count sample_rank = plan.sample_rank, k = plan.k, enough = enoughFor(plan.k), most = mostPairs(plan.k);
    selectReset<<<1, 1, 0, s>>>(st());
    if (warming_) {
      planWarmup<<<1, 1, 0, s>>>(v + kArrays * n, s_, q_, n, samples, st());
      sample_rank = Count::plannedAt(kPlanSampleRank);
      k = Count::plannedAt(kPlanK);
      enough = Count::plannedAt(kPlanEnough);
      most = Count::plannedAt(kPlanMost);
    }
    updateKernel<Def><<<blocksFor(n), kThreads, 0, s>>>(in.data(), v, m, n, p_);
    if (!exact(s_)) {
      selectSampled(v, n, samples, sample_rank, Def::stream(p_, id.key, id.slice, id.step), s);
      if (s_.lowers) {
        // Too few reach the cut: lower it (each step waits on the device's count, not the host's).
        clearCount<<<1, 1, 0, s>>>(st());
        for (int t = 0; t < kMaxLowerings; ++t) {
          countReaching(v, n, true, s);
          relaxStep<<<1, 1, 0, s>>>(st(), enough, kLowerBy);
        }
      }
      // More than the most reach the cut: the k largest of them go, i.e. the k largest of all.
      countReaching(v, n, false, s);
      decideExact<<<1, 1, 0, s>>>(st(), s_.lowers ? most : k);
    }
    selectLargest(v, n, k, s);
    writePairs(v, m, n, out.data(), s);  // a sent element restarts in its moment too
    GC_RETURN_IF_ERROR(launched(name()));
    return maxEncodedBytes(n);
  }

  Status init() { return initFaults(); }

 protected:
  Status checkDecodeSize(size_t n, size_t have) const override {
    return exact(s_) ? checkEncodedSize(name(), n, have, maxEncodedBytes(n))
                     : sparse::checkAtMost(name(), n, have, maxEncodedBytes(n));
  }

 private:
  typename Def::Params p_;
  Selection s_;
  bool feedback_;
  bool warming_;
  double q_;
  compress::cuda::DeviceBuffer<float> scratch_;
};

}  // namespace gcagent::compress::compll

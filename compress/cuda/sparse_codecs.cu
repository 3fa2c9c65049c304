// topk, threshold and dgc on the GPU, with the CPU codecs' exact choices (see
// compress/topk/topk.cc, compress/threshold/threshold.cc, compress/dgc/dgc.cc and
// compress/sparse/select.h): a radix select instead of introselect, an ordered compaction
// instead of a loop, the same (index, value) format (compress/sparse/sparse_format.h).
// The encoded size of threshold and dgc varies: encode() returns the bound, and the exact
// size is 4 + 8 * the count in the first four bytes once finish() has returned.
#include <algorithm>
#include <memory>

#include "compress/cuda/codecs.h"
#include "compress/cuda/launch.cuh"
#include "compress/cuda/sparse_select.cuh"
#include "compress/dgc/dgc.h"
#include "compress/dgc/dgc_math.h"
#include "compress/params.h"
#include "compress/random_math.h"
#include "compress/sparse/select.h"

namespace gcagent::compress::cuda {
namespace {

__global__ void accumulate(const float* __restrict__ g, float* __restrict__ r, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) r[i] += g[i];
}

__global__ void momentum(const float* __restrict__ g, float* __restrict__ u, float* __restrict__ v,
                         size_t n, float m) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dgc::momentumStep(g[i], u[i], v[i], m);
}

// ---- decoding: the count, then every pair (range, then repeats), then the sum.

__global__ void checkCount(const uint32_t* __restrict__ in, size_t n, size_t bytes, DeviceFault* fault) {
  const uint32_t count = in[0];
  if (count > n) {
    fault->detail = count;
    fault->extra = n;
    raiseFault(fault, kFaultBadCount, 0);
  } else if (4 + 8 * static_cast<size_t>(count) != bytes) {  // sparse::bytesFor(count)
    fault->detail = count;
    fault->extra = bytes;
    raiseFault(fault, kFaultBadCount, 1);
  }
}

__global__ void checkPairs(const uint32_t* __restrict__ in, size_t n, size_t most, uint32_t* seen,
                           DeviceFault* fault) {
  const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (faulted(fault)) return;  // a bad count: the pairs are not where they seem
  if (p >= in[0] || p >= most) return;
  const uint32_t index = in[1 + p];
  if (index >= n) {
    raiseFault(fault, kFaultBadPair, p);
    return;
  }
  const uint32_t bit = 1u << (index % 32);
  if ((atomicOr(&seen[index / 32], bit) & bit) != 0) raiseFault(fault, kFaultBadPair, p);
}

__global__ void recordPair(const uint32_t* __restrict__ in, size_t n, DeviceFault* fault) {
  if (faultKind(*fault) != kFaultBadPair) return;
  fault->detail = in[1 + faultIndex(*fault)];
  fault->extra = n;
}

__global__ void addPairs(const uint32_t* __restrict__ in, float* __restrict__ acc, size_t most,
                         const DeviceFault* fault) {
  const size_t p = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (faulted(fault)) return;
  const uint32_t count = in[0];
  if (p >= count || p >= most) return;
  acc[in[1 + p]] += reinterpret_cast<const float*>(in + 1 + count)[p];
}

// What the three codecs share: the selection workspace and the decoder.
class GpuSparseCodec : public FaultingGpuCodec {
 public:
  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&,
                   GpuStream stream) override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkDecodeSize(n, in.size()));
    if (in.size() < 4)
      return Status::dataLoss(strCat(name(), ": encoded buffer holds ", in.size(),
                                     " bytes, less than the 4-byte count header"));
    GC_RETURN_IF_ERROR(checkAligned(name(), in.data(), "encoded"));
    const size_t most = (in.size() - 4) / 8;
    const size_t words = (n + 31) / 32;
    if (seen_.size() < std::max<size_t>(words, 1)) {
      GC_ASSIGN_OR_RETURN(seen_, DeviceBuffer<uint32_t>::allocate(std::max<size_t>(words, 1)));
    }
    const cudaStream_t s = toCuda(stream);
    const auto* words_in = reinterpret_cast<const uint32_t*>(in.data());
    checkCount<<<1, 1, 0, s>>>(words_in, n, in.size(), fault());
    if (most != 0) {
      cudaMemsetAsync(seen_.data(), 0, 4 * words, s);
      checkPairs<<<blocksFor(most), kThreads, 0, s>>>(words_in, n, most, seen_.data(), fault());
      recordPair<<<1, 1, 0, s>>>(words_in, n, fault());
      addPairs<<<blocksFor(most), kThreads, 0, s>>>(words_in, acc.data(), most, fault());
    }
    return launched(name());
  }

 protected:
  virtual Status checkDecodeSize(size_t n, size_t have) const = 0;

  Status describe(const DeviceFault& f) const override {
    switch (faultKind(f)) {
      case kFaultBadCount:
        if (faultIndex(f) == 0)
          return Status::dataLoss(strCat(name(), ": encoded count ", f.detail, " exceeds the slice length ", f.extra));
        return Status::dataLoss(strCat(name(), ": encoded buffer holds ", f.extra, " bytes, but ", f.detail,
                                       " pairs need ", sparse::bytesFor(f.detail)));
      case kFaultBadPair:
        if (f.detail >= f.extra)
          return Status::dataLoss(strCat(name(), ": pair ", faultIndex(f), " has index ", f.detail,
                                         ", outside the slice of ", f.extra, " elements"));
        return Status::dataLoss(strCat(name(), ": pair ", faultIndex(f), " repeats index ", f.detail));
      default:
        return FaultingGpuCodec::describe(f);
    }
  }

  // Device workspace for a slice of n elements and a sample of `samples` keys.
  Status reserve(size_t n, size_t samples) {
    if (state_.size() == 0) {
      GC_ASSIGN_OR_RETURN(state_, DeviceBuffer<SelectState>::allocate(1));
    }
    const size_t tiles = std::max<size_t>((n + kTile - 1) / kTile, 1);
    if (tiles_.size() < tiles) {
      GC_ASSIGN_OR_RETURN(tiles_, DeviceBuffer<uint32_t>::allocate(tiles));
    }
    if (samples < n && sample_keys_.size() < samples) {
      GC_ASSIGN_OR_RETURN(sample_keys_, DeviceBuffer<uint32_t>::allocate(samples));
    }
    return {};
  }

  SelectState* st() const { return state_.data(); }

  // The rank-th largest key of x (over all n elements), ties resolved to the lower index.
  void selectLargest(const float* x, size_t n, Count rank, cudaStream_t s) {
    radixSelect(KeySource{x, nullptr}, n, rank, s);
    const unsigned tiles = static_cast<unsigned>((n + kTile - 1) / kTile);
    countEqualPerTile<<<tiles, kTileThreads, 0, s>>>(x, n, st(), tiles_.data());
    findLastTie<<<1, 1, 0, s>>>(x, n, tiles_.data(), st());
  }

  // The rank-th largest of `samples` keys drawn from x as the CPU draws them (all of x when
  // samples >= n); every key at or above it goes.
  void selectSampled(const float* x, size_t n, size_t samples, Count rank, uint64_t stream,
                     cudaStream_t s) {
    if (samples >= n) {
      radixSelect(KeySource{x, nullptr}, n, rank, s);
    } else {
      gatherSample<<<blocksFor(samples), kThreads, 0, s>>>(x, n, samples, stream, sample_keys_.data());
      radixSelect(KeySource{nullptr, sample_keys_.data()}, samples, rank, s);
    }
    takeAllAtCut<<<1, 1, 0, s>>>(st());
  }

  void countReaching(const float* x, size_t n, bool unless_settled, cudaStream_t s) {
    if (!unless_settled) clearCount<<<1, 1, 0, s>>>(st());
    countAtLeast<<<histogramBlocks(n), kThreads, 0, s>>>(x, n, st(), unless_settled);
  }

  // Writes the chosen elements of x as pairs into out and zeroes them in x (and in `also`).
  void writePairs(float* x, float* also, size_t n, std::byte* out, cudaStream_t s) {
    const unsigned tiles = static_cast<unsigned>((n + kTile - 1) / kTile);
    auto* words = reinterpret_cast<uint32_t*>(out);
    countChosenPerTile<<<tiles, kTileThreads, 0, s>>>(x, n, st(), tiles_.data());
    scanTiles<<<1, 1024, 0, s>>>(tiles_.data(), tiles, words);
    writeChosen<<<tiles, kTileThreads, 0, s>>>(x, also, n, st(), tiles_.data(), words);
  }

 private:
  static unsigned histogramBlocks(size_t count) {
    return static_cast<unsigned>(std::min<size_t>(blocksFor(count), 1024));
  }

  void radixSelect(KeySource src, size_t count, Count rank, cudaStream_t s) {
    radixStart<<<1, 1, 0, s>>>(st(), rank);
    for (int shift = 24; shift >= 0; shift -= 8) {
      radixHistogram<<<histogramBlocks(count), kThreads, 0, s>>>(src, count, st(), shift);
      radixPick<<<1, 1, 0, s>>>(st(), shift);
    }
  }

  DeviceBuffer<SelectState> state_;
  DeviceBuffer<uint32_t> tiles_;
  DeviceBuffer<uint32_t> sample_keys_;
  DeviceBuffer<uint32_t> seen_;
};

class GpuTopkCodec final : public GpuSparseCodec {
 public:
  explicit GpuTopkCodec(double ratio) : ratio_(ratio) {}

  std::string_view name() const override { return "topk"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return sparse::bytesFor(sparse::countFor(ratio_, n)); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId&, GpuStream stream) override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), maxEncodedBytes(n)));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    const cudaStream_t s = toCuda(stream);
    if (n == 0) {
      cudaMemsetAsync(out.data(), 0, 4, s);
      return launchedBytes(0);
    }
    GC_RETURN_IF_ERROR(reserve(n, 0));
    float* r = state.data();
    accumulate<<<blocksFor(n), kThreads, 0, s>>>(in.data(), r, n);
    selectReset<<<1, 1, 0, s>>>(st());
    selectLargest(r, n, sparse::countFor(ratio_, n), s);
    writePairs(r, nullptr, n, out.data(), s);
    return launchedBytes(n);
  }

  Status init() { return initFaults(); }

 protected:
  Status checkDecodeSize(size_t n, size_t have) const override {
    return checkEncodedSize(name(), n, have, maxEncodedBytes(n));
  }

 private:
  Result<size_t> launchedBytes(size_t n) {
    GC_RETURN_IF_ERROR(launched(name()));
    return maxEncodedBytes(n);
  }

  double ratio_;
};

class GpuThresholdCodec final : public GpuSparseCodec {
 public:
  GpuThresholdCodec(double drop, double sample, uint64_t seed)
      : keep_(1 - drop), sample_(sample), seed_(seed) {}

  std::string_view name() const override { return "threshold"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return sparse::bytesFor(sparse::countFor(keep_, n)); }
  bool isFixedSize() const override { return false; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id, GpuStream stream) override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), maxEncodedBytes(n)));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    const cudaStream_t s = toCuda(stream);
    if (n == 0) {
      cudaMemsetAsync(out.data(), 0, 4, s);
      GC_RETURN_IF_ERROR(launched(name()));
      return sparse::bytesFor(0);
    }
    const size_t samples = sparse::sampleCount(sample_, n);
    const size_t k = sparse::countFor(keep_, n);
    GC_RETURN_IF_ERROR(reserve(n, samples));
    float* r = state.data();
    accumulate<<<blocksFor(n), kThreads, 0, s>>>(in.data(), r, n);
    selectReset<<<1, 1, 0, s>>>(st());
    selectSampled(r, n, samples, sparse::countFor(keep_, std::min(samples, n)),
                  rng::streamSeed(seed_, id.key, id.slice, id.step), s);
    // More than k reach the cut: the k largest of them go, i.e. the k largest of all.
    countReaching(r, n, false, s);
    decideExact<<<1, 1, 0, s>>>(st(), k);
    selectLargest(r, n, k, s);
    writePairs(r, nullptr, n, out.data(), s);
    GC_RETURN_IF_ERROR(launched(name()));
    return maxEncodedBytes(n);
  }

  Status init() { return initFaults(); }

 protected:
  Status checkDecodeSize(size_t n, size_t have) const override {
    return sparse::checkAtMost(name(), n, have, maxEncodedBytes(n));
  }

 private:
  double keep_;
  double sample_;
  uint64_t seed_;
};

constexpr float kLowerBy = 0.8f;
constexpr int kMaxLowerings = 10;

__host__ __device__ inline size_t mostPairs(size_t k) { return k + 3 * k / 10; }

// The counts of an encode under dgc's warm-up, from the encodes the slice's state records
// (after v and u), which it then advances: what the CPU codec does on the host.
enum : int { kPlanSampleRank = 0, kPlanK = 1, kPlanEnough = 2, kPlanMost = 3 };

__global__ void planWarmup(float* __restrict__ encodes, double ratio, double q, uint64_t warmup, size_t n,
                           size_t samples, SelectState* st) {
  const auto t = static_cast<uint64_t>(*encodes);
  const dgc::Plan plan = dgc::planFor(dgc::keptFraction(ratio, q, t, warmup), n, samples);
  st->plan[kPlanSampleRank] = plan.sample_rank;
  st->plan[kPlanK] = plan.k;
  st->plan[kPlanEnough] = (4 * plan.k + 4) / 5;
  st->plan[kPlanMost] = mostPairs(plan.k);
  if (t < warmup) *encodes = static_cast<float>(t + 1);
}

class GpuDgcCodec final : public GpuSparseCodec {
 public:
  GpuDgcCodec(double ratio, float momentum, double sample, uint64_t seed, uint64_t warmup)
      : ratio_(ratio), momentum_(momentum), sample_(sample), seed_(seed), warmup_(warmup),
        warmup_factor_(dgc::warmupFactor(ratio, warmup)) {}

  std::string_view name() const override { return "dgc"; }
  size_t stateElements(size_t n) const override { return 2 * n + (warmup_ != 0 ? 1 : 0); }
  size_t maxEncodedBytes(size_t n) const override {
    return sparse::bytesFor(std::min(n, mostPairs(sparse::countFor(dgc::mostKept(ratio_, warmup_), n))));
  }
  bool isFixedSize() const override { return false; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id, GpuStream stream) override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), maxEncodedBytes(n)));
    GC_RETURN_IF_ERROR(checkAligned(name(), out.data(), "output"));
    const cudaStream_t s = toCuda(stream);
    float* v = state.data();
    float* u = state.data() + n;
    if (n == 0) {
      cudaMemsetAsync(out.data(), 0, 4, s);
      GC_RETURN_IF_ERROR(launched(name()));
      return sparse::bytesFor(0);
    }
    const size_t samples = sparse::sampleCount(sample_, n);
    GC_RETURN_IF_ERROR(reserve(n, samples));
    // The counts: the host's without a warm-up, else planned on the device from the slice's
    // encode count (so encode() still never waits for the GPU).
    const dgc::Plan plan = dgc::planFor(ratio_, n, samples);
    Count sample_rank = plan.sample_rank, k = plan.k, enough = (4 * plan.k + 4) / 5, most = mostPairs(plan.k);
    selectReset<<<1, 1, 0, s>>>(st());
    if (warmup_ != 0) {
      planWarmup<<<1, 1, 0, s>>>(state.data() + 2 * n, ratio_, warmup_factor_, warmup_, n, samples, st());
      sample_rank = Count::plannedAt(kPlanSampleRank);
      k = Count::plannedAt(kPlanK);
      enough = Count::plannedAt(kPlanEnough);
      most = Count::plannedAt(kPlanMost);
    }
    momentum<<<blocksFor(n), kThreads, 0, s>>>(in.data(), u, v, n, momentum_);
    selectSampled(v, n, samples, sample_rank, rng::streamSeed(seed_, id.key, id.slice, id.step), s);
    // Too few reach the cut: lower it (each step waits on the device's count, not the host's).
    clearCount<<<1, 1, 0, s>>>(st());
    for (int t = 0; t < kMaxLowerings; ++t) {
      countReaching(v, n, true, s);
      relaxStep<<<1, 1, 0, s>>>(st(), enough, kLowerBy);
    }
    countReaching(v, n, false, s);
    decideExact<<<1, 1, 0, s>>>(st(), most);
    selectLargest(v, n, k, s);
    // Momentum factor masking: a sent coordinate restarts in u as in v.
    writePairs(v, u, n, out.data(), s);
    GC_RETURN_IF_ERROR(launched(name()));
    return maxEncodedBytes(n);
  }

  Status init() { return initFaults(); }

 protected:
  Status checkDecodeSize(size_t n, size_t have) const override {
    return sparse::checkAtMost(name(), n, have, maxEncodedBytes(n));
  }

 private:
  double ratio_;
  float momentum_;
  double sample_;
  uint64_t seed_;
  uint64_t warmup_;
  double warmup_factor_;
};

template <class C>
Result<std::unique_ptr<GpuCodec>> initialized(std::unique_ptr<C> codec) {
  GC_RETURN_IF_ERROR(codec->init());
  return std::unique_ptr<GpuCodec>(std::move(codec));
}

}  // namespace

Result<std::unique_ptr<GpuCodec>> makeGpuTopk(const Params& params) {
  ParamReader reader("topk", params);
  const double ratio = reader.real("ratio", 0.01, Range::openClosed(0, 1));
  GC_RETURN_IF_ERROR(reader.finish());
  return initialized(std::make_unique<GpuTopkCodec>(ratio));
}

Result<std::unique_ptr<GpuCodec>> makeGpuThreshold(const Params& params) {
  ParamReader reader("threshold", params);
  const double drop = reader.real("drop", 0.99, Range{0, 1, false, true});
  const double sample = reader.real("sample", 0.001, Range::openClosed(0, 1));
  const uint64_t seed = reader.seed("seed", 0);
  GC_RETURN_IF_ERROR(reader.finish());
  return initialized(std::make_unique<GpuThresholdCodec>(drop, sample, seed));
}

Result<std::unique_ptr<GpuCodec>> makeGpuDgc(const Params& params) {
  ParamReader reader("dgc", params);
  const double ratio = reader.real("ratio", kDgcDefaultRatio, Range::openClosed(0, 1));
  const double momentum = reader.real("momentum", kDgcDefaultMomentum, Range{0, 1, false, true});
  const double sample = reader.real("sample", 0.01, Range::openClosed(0, 1));
  const uint64_t seed = reader.seed("seed", 0);
  const int64_t warmup = reader.integer("warmup_steps", kDgcDefaultWarmupSteps, Range::closed(0, 1000000));
  GC_RETURN_IF_ERROR(reader.finish());
  return initialized(
      std::make_unique<GpuDgcCodec>(ratio, static_cast<float>(momentum), sample, seed, static_cast<uint64_t>(warmup)));
}

}  // namespace gcagent::compress::cuda

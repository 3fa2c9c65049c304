// CompLL's selection operators, shared by every selecting definition on the CPU and the GPU:
// how many elements an encode sends, and how its cut is found (compress/sparse/select.h holds
// the CPU's sampled quantile, collection, lowering and exact top-k; cuda/sparse_select.cuh the
// GPU's). A selecting definition names a Selection; the rest is the layer's:
//   k = max(1, ceil(kept * n)), kept after the sparsity warm-up (below);
//   exact (sample 0, topk): the k largest |x| go, equal magnitudes to the lower index (a
//     sampled cut only narrows the candidates first, sparse::prefilterRank);
//   else the cut: the rank ceil(kept * s)-th largest |x| of s = max(256, ceil(sample * n))
//     elements drawn with replacement from the slice's stream (slices no larger than the
//     sample are read whole, making the cut the exact k-th largest), and every element at or
//     above it goes, but never more than k: when more reach it, the k largest go (threshold);
//   with `lowers` (DGC): while fewer than ceil(0.8 k) reach the cut, it is lowered by 0.8x, at
//     most 10 times, and the k largest go only when more than floor(1.3 k) reach it.
// Every count is a product of doubles alone (nothing for nvcc to fuse), so the device plans
// the same counts as the host.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "compress/hd.h"
#include "compress/sparse/sparse_math.h"

namespace gcagent::compress::compll {

struct Selection {
  double kept;      // fraction of the slice sent once the warm-up is over, in (0, 1]
  double sample;    // fraction of the slice the cut is estimated from, in (0, 1]; 0: none,
                    // the exact k largest go (top-k), always k of them
  uint64_t warmup;  // encodes of a slice over which the fraction falls to `kept` (0: none)
  bool lowers;      // DGC's remedies: a cut that lets fewer than ceil(0.8 k) through is
                    // lowered, and up to floor(1.3 k) go; else never more than k go
};

GC_HD bool exact(const Selection& s) { return s.sample == 0; }

inline constexpr float kLowerBy = 0.8f;
inline constexpr int kMaxLowerings = 10;

// The fewest that must reach the cut before it stops being lowered: ceil(0.8 k).
GC_HD size_t enoughFor(size_t k) { return (4 * k + 4) / 5; }
// The most sent before the exact k largest are taken instead: floor(1.3 k).
GC_HD size_t mostPairs(size_t k) { return k + 3 * k / 10; }

// DGC's sparsity warm-up: the fraction kept at encode t (0 for the first) falls geometrically
// from kWarmupStart (sparsity 75%) to `kept` over the first `warmup` encodes,
//   kept(t) = 0.25 q^t for t < warmup, `kept` from t = warmup on, q = (kept / 0.25)^(1/warmup)
// (DGC's 75%, 93.75%, 98.4375%, 99.6%, 99.9% over four epochs is q = 1/4 per epoch). q is
// warmupFactor()'s, computed once on the host; q^t is taken by squaring and multiplying, so
// the CPU and the GPU keep the same counts. No warm-up when warmup is 0 or kept is already at
// least 25%.
inline constexpr double kWarmupStart = 0.25;

GC_HD double keptFraction(double kept, double q, uint64_t t, uint64_t warmup) {
  if (t >= warmup || kept >= kWarmupStart) return kept;
  double power = 1, base = q;
  for (uint64_t e = t; e != 0; e >>= 1) {
    if (e & 1) power *= base;
    base *= base;
  }
  const double fraction = kWarmupStart * power;
  return fraction > kept ? fraction : kept;
}

inline double warmupFactor(double kept, uint64_t warmup) {
  return warmup == 0 || kept >= kWarmupStart ? 1.0 : std::pow(kept / kWarmupStart, 1.0 / static_cast<double>(warmup));
}

// The largest fraction any encode keeps: what the encoded size is bounded by.
GC_HD double mostKept(double kept, uint64_t warmup) { return warmup != 0 && kept < kWarmupStart ? kWarmupStart : kept; }

// The counts an encode works with for a slice of n elements, `samples` of them sampled.
struct Plan {
  size_t k;            // the target: countFor(kept, n)
  size_t sample_rank;  // the cut's rank in the sample: countFor(kept, min(samples, n))
};

GC_HD Plan planFor(double kept, size_t n, size_t samples) {
  return {sparse::countFor(kept, n), sparse::countFor(kept, samples < n ? samples : n)};
}

// The pairs an encode of n elements sends at most, with and without the warm-up.
GC_HD size_t mostSent(const Selection& s, size_t n, bool warming) {
  const size_t k = sparse::countFor(mostKept(s.kept, warming ? s.warmup : 0), n);
  const size_t pairs = s.lowers ? mostPairs(k) : k;
  return pairs < n ? pairs : n;
}

}  // namespace gcagent::compress::compll

// Deep Gradient Compression's element math (Lin et al. 2018).
#pragma once

#include <cmath>

#include "compress/hd.h"
#include "compress/sparse/sparse_math.h"

namespace gcagent::compress::dgc {

// Momentum correction: the velocity u = m u + g, not g itself, accumulates into v, so what v
// eventually sends carries the momentum a dense optimizer would have applied. Rounded as
// written on both CPU and GPU (nvcc would otherwise fuse the multiply-add) so both give the
// same bits.
GC_HD void momentumStep(float g, float& u, float& v, float m) {
#if defined(__CUDA_ARCH__)
  u = __fadd_rn(__fmul_rn(m, u), g);
#else
  u = m * u + g;
#endif
  v += u;
}

// DGC's sparsity warm-up: the fraction of a slice kept at its encode t (0 for the first) falls
// geometrically from kWarmupStart (sparsity 75%) to `ratio` over the first `warmup` encodes,
//   kept(t) = 0.25 * q^t for t < warmup, ratio from t = warmup on, with q = (ratio / 0.25)^(1/warmup)
// (the paper's 75%, 93.75%, 98.4375%, 99.6%, 99.9% over four epochs is q = 1/4 per epoch).
// `q` is warmupFactor()'s, computed once on the host; q^t is taken by squaring and multiplying
// (products alone, which no compiler fuses), so the CPU and the GPU keep the same counts. No
// warm-up when warmup is 0 or ratio is already at least 25%.
inline constexpr double kWarmupStart = 0.25;

GC_HD double keptFraction(double ratio, double q, uint64_t t, uint64_t warmup) {
  if (t >= warmup || ratio >= kWarmupStart) return ratio;
  double power = 1, base = q;
  for (uint64_t e = t; e != 0; e >>= 1) {
    if (e & 1) power *= base;
    base *= base;
  }
  const double kept = kWarmupStart * power;
  return kept > ratio ? kept : ratio;
}

// q of keptFraction(), on the host (CPU and GPU codecs alike, so both hold the same q).
inline double warmupFactor(double ratio, uint64_t warmup) {
  return warmup == 0 || ratio >= kWarmupStart ? 1.0 : std::pow(ratio / kWarmupStart, 1.0 / static_cast<double>(warmup));
}

// The largest fraction any encode keeps: what the encoded size is bounded by.
GC_HD double mostKept(double ratio, uint64_t warmup) {
  return warmup != 0 && ratio < kWarmupStart ? kWarmupStart : ratio;
}

// The counts an encode works with for a slice of n elements, `samples` of them sampled.
struct Plan {
  size_t k;            // the target: countFor(kept, n)
  size_t sample_rank;  // the cut's rank in the sample: countFor(kept, min(samples, n))
};

GC_HD Plan planFor(double kept, size_t n, size_t samples) {
  return {sparse::countFor(kept, n), sparse::countFor(kept, samples < n ? samples : n)};
}

}  // namespace gcagent::compress::dgc

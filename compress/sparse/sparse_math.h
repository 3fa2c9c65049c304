// Element math shared by the sparse codecs (topk, threshold, dgc, randomk): an integer key
// that orders like |x|, and index draws from the codecs' counter-based generator. Both give
// the same bits on CPU and GPU, so a receiver on either regenerates what a sender drew.
#pragma once

#include <cmath>

#include "compress/hd.h"
#include "compress/random_math.h"

namespace gcagent::compress::sparse {

// |x| as an integer with the same order: an IEEE float without its sign bit compares as
// its magnitude. +0 and -0 both map to 0; NaN sorts above infinity, so the order is total.
GC_HD uint32_t magnitudeKey(float x) { return bitsOf(x) & 0x7fffffffu; }

// The key of the magnitude `key` stands for, times `factor` (DGC lowers its threshold so).
GC_HD uint32_t scaledKey(uint32_t key, float factor) { return magnitudeKey(floatOf(key) * factor); }

// max(1, ceil(fraction * n)), 0 for an empty slice. The product's rounding error is forgiven,
// so 0.07 of 100 is 7 and (1 - 0.99) of 100 is 1, as whoever wrote the config means. Products
// alone (nothing for nvcc to fuse), so the device counts as the host does.
GC_HD size_t countFor(double fraction, size_t n) {
  if (n == 0) return 0;
  const double count = ceil(fraction * static_cast<double>(n) * (1 - 1e-9));
  const size_t c = static_cast<size_t>(count);
  return c < 1 ? 1 : (c > n ? n : c);
}

// 64 random bits mapped onto [0, bound) by the high half of their product with bound
// (Lemire 2019): no division, bias below bound / 2^64.
GC_HD uint64_t below(uint64_t bits, uint64_t bound) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(bits, bound);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * bound) >> 64);
#endif
}

// Draw j of a sample taken with replacement from [0, n).
GC_HD uint64_t sampleIndex(uint64_t stream, uint64_t j, uint64_t n) {
  return below(rng::bits64(stream, j), n);
}

}  // namespace gcagent::compress::sparse

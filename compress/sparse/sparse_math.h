// Element math shared by the sparse codecs (topk, threshold, dgc, randomk): an integer key
// that orders like |x|, and a counter-based generator for sample and index draws. Both give
// the same bits on CPU and GPU, so a receiver on either regenerates what a sender drew.
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::sparse {

// |x| as an integer with the same order: an IEEE float without its sign bit compares as
// its magnitude. +0 and -0 both map to 0; NaN sorts above infinity, so the order is total.
GC_HD uint32_t magnitudeKey(float x) { return bitsOf(x) & 0x7fffffffu; }

// The key of the magnitude `key` stands for, times `factor` (DGC lowers its threshold so).
GC_HD uint32_t scaledKey(uint32_t key, float factor) { return magnitudeKey(floatOf(key) * factor); }

// splitmix64's increment, 2^64 / golden ratio.
inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// splitmix64's output function (Steele et al. 2014): a bijection whose outputs for
// consecutive inputs look independent.
GC_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

GC_HD uint64_t mixIn(uint64_t state, uint64_t value) {
  return mix64(state ^ mix64(value + kGolden));
}

// One stream per (seed, key, slice, step); sender and receiver derive the same one.
GC_HD uint64_t streamOf(uint64_t seed, uint64_t key, uint64_t slice, uint64_t step) {
  return mixIn(mixIn(mixIn(mix64(seed + kGolden), key), slice), step);
}

// The counter-th 64 random bits of a stream: splitmix64's sequence started at `stream`, read
// at any position without walking to it.
GC_HD uint64_t randomBits(uint64_t stream, uint64_t counter) {
  return mix64(stream + (counter + 1) * kGolden);
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
  return below(randomBits(stream, j), n);
}

}  // namespace gcagent::compress::sparse

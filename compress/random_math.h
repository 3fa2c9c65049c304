// Counter-based random numbers for the stochastic codecs. A draw is a pure function of
// (seed, slice id, element index), so it does not depend on how a slice is split over
// threads, and a GPU kernel reproduces the CPU's draws bit for bit.
//
// The generator is splitmix64 (Steele, Lea, Flood 2014; passes BigCrush): draw i of a stream
// is mix64(stream + (i + 1) * golden), i.e. the splitmix64 sequence started at `stream`,
// evaluated out of order.
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::rng {

inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;  // 2^64 / golden ratio, odd

// splitmix64's output function: a bijection on 64 bits with full avalanche.
GC_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The stream of one encoding: a codec's `seed` parameter and the slice it codes. Each field
// is mixed in separately, so no two different tuples are related by a simple shift.
GC_HD uint64_t streamSeed(uint64_t seed, uint64_t key, uint32_t slice, uint64_t step) {
  uint64_t h = mix64(seed + kGolden);
  h = mix64(h ^ key);
  h = mix64(h ^ static_cast<uint64_t>(slice));
  return mix64(h ^ step);
}

// The index-th 64 random bits of a stream: splitmix64's sequence started at `stream`, read
// at any position without walking to it.
GC_HD uint64_t bits64(uint64_t stream, uint64_t index) { return mix64(stream + (index + 1) * kGolden); }

// Draw `index` of `stream`, uniform on [0, 1) in steps of 2^-24 (every value is an exact
// float, and 1 is never returned, so `u < p` is true for p == 1 and false for p == 0).
GC_HD float uniform01(uint64_t stream, uint64_t index) {
  const uint64_t bits = bits64(stream, index) >> 40;
  return static_cast<float>(static_cast<int32_t>(bits)) * 0x1p-24f;
}

}  // namespace gcagent::compress::rng

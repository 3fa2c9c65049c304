// rng::uniform01 (compress/random_math.h) for eight consecutive draws at once, for the AVX2
// loops of the stochastic codecs. Include only from *_avx2.cc files: every function here is
// compiled for AVX2. splitmix64 runs in four 64-bit lanes; AVX2 has no 64-bit multiply, so
// each product is put together from three 32-bit ones, exact modulo 2^64.
#pragma once

#include "compress/cpu/isa.h"

#if GC_CPU_X86

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "compress/random_math.h"

namespace gcagent::compress::cpu {

// a * c modulo 2^64 in each lane, for a constant c = (c_high << 32) | c_low.
GC_TARGET_AVX2 inline __m256i mul64(__m256i a, __m256i c_low, __m256i c_high) {
  const __m256i low = _mm256_mul_epu32(a, c_low);
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(a, c_high),
                                         _mm256_mul_epu32(_mm256_srli_epi64(a, 32), c_low));
  return _mm256_add_epi64(low, _mm256_slli_epi64(cross, 32));
}

// rng::mix64 in four lanes.
GC_TARGET_AVX2 inline __m256i mix64(__m256i z) {
  const __m256i c1_low = _mm256_set1_epi64x(0x1ce4e5b9ll),
                c1_high = _mm256_set1_epi64x(0xbf58476dll);
  const __m256i c2_low = _mm256_set1_epi64x(0x133111ebll),
                c2_high = _mm256_set1_epi64x(0x94d049bbll);
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), c1_low, c1_high);
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), c2_low, c2_high);
  return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

// rng::uniform01(stream, i .. i+7), walking forward eight draws per call.
class Uniform8 {
 public:
  // Draw i's splitmix64 state is stream + (i + 1) * golden (rng::bits64).
  GC_TARGET_AVX2 Uniform8(uint64_t stream, size_t first) {
    alignas(32) uint64_t lanes[8];
    for (uint64_t j = 0; j < 8; ++j) lanes[j] = stream + (first + j + 1) * rng::kGolden;
    low_ = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
    high_ = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes + 4));
  }

  GC_TARGET_AVX2 __m256 next() {
    const __m256i a = _mm256_srli_epi64(mix64(low_), 40);  // 24 bits in each low half
    const __m256i b = _mm256_srli_epi64(mix64(high_), 40);
    const __m256i step = _mm256_set1_epi64x(static_cast<long long>(8 * rng::kGolden));
    low_ = _mm256_add_epi64(low_, step);
    high_ = _mm256_add_epi64(high_, step);
    // a0 b0 a1 b1 ... as 32-bit lanes, then back in order.
    const __m256i mixed = _mm256_or_si256(a, _mm256_slli_epi64(b, 32));
    const __m256i ordered =
        _mm256_permutevar8x32_epi32(mixed, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(ordered), _mm256_set1_ps(0x1p-24f));
  }

 private:
  __m256i low_, high_;
};

}  // namespace gcagent::compress::cpu

#endif  // GC_CPU_X86

// The selection passes for AVX2. Eight magnitude keys are compared at once against key - 1
// (keys are below 2^31, so a signed compare orders them); groups of 32 with no element
// passing, the common case at the densities sparse codecs run at, cost no branch per
// element. A passing group of 8 is packed with a table lookup and a permute.
#include "compress/sparse/select_kernels.h"

#if GC_CPU_X86

#include <immintrin.h>

#include <array>

#include "compress/sparse/sparse_math.h"

namespace gcagent::compress::sparse {
namespace {

// For a mask of 8 lanes: the set lanes' numbers packed into the low bytes, and how many.
struct Pack {
  uint64_t lanes;
  uint32_t count;
};

constexpr std::array<Pack, 256> makePacks() {
  std::array<Pack, 256> table{};
  for (uint32_t mask = 0; mask < 256; ++mask) {
    uint32_t count = 0;
    for (uint32_t lane = 0; lane < 8; ++lane)
      if (mask & (1u << lane)) table[mask].lanes |= uint64_t{lane} << (8 * count++);
    table[mask].count = count;
  }
  return table;
}
constexpr std::array<Pack, 256> kPacks = makePacks();

// Lanes whose magnitude key exceeds `below` (key - 1), as a bit mask.
GC_TARGET_AVX2 inline uint32_t passMask(__m256 x, __m256i below) {
  const __m256i keys = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
  return static_cast<uint32_t>(
      _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(keys, below))));
}

// Stores the indices first + lane of the set lanes at out (8 entries written), returns how many.
GC_TARGET_AVX2 inline size_t pack(uint32_t mask, size_t first, uint32_t* out) {
  const __m256i lanes =
      _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(kPacks[mask].lanes)));
  const __m256i idx = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first)),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(idx, lanes));
  return kPacks[mask].count;
}

GC_TARGET_AVX2 inline __m256i belowOf(uint32_t key) {
  // key 0 lets everything pass: -1 is below every key.
  return _mm256_set1_epi32(static_cast<int>(key) - 1);
}

// The shared loop: `step(i)` updates elements i .. i+7 and returns them as they now are.
template <class Step, class Tail>
GC_TARGET_AVX2 inline size_t collectLoop(size_t begin, size_t end, uint32_t key, uint32_t* out,
                                         Step step, Tail tail) {
  const __m256i below = belowOf(key);
  size_t count = 0;
  size_t i = begin;
  for (; i + 32 <= end; i += 32) {
    const uint32_t m0 = passMask(step(i), below);
    const uint32_t m1 = passMask(step(i + 8), below);
    const uint32_t m2 = passMask(step(i + 16), below);
    const uint32_t m3 = passMask(step(i + 24), below);
    if ((m0 | m1 | m2 | m3) == 0) continue;
    count += pack(m0, i, out + count);
    count += pack(m1, i + 8, out + count);
    count += pack(m2, i + 16, out + count);
    count += pack(m3, i + 24, out + count);
  }
  for (; i + 8 <= end; i += 8) {
    const uint32_t m = passMask(step(i), below);
    if (m != 0) count += pack(m, i, out + count);
  }
  for (; i < end; ++i) {
    out[count] = static_cast<uint32_t>(i);
    count += magnitudeKey(tail(i)) >= key ? 1 : 0;
  }
  return count;
}

GC_TARGET_AVX2 size_t collectAvx2(const float* x, size_t begin, size_t end, uint32_t key,
                                  uint32_t* out) {
  return collectLoop(
      begin, end, key, out, [x](size_t i) GC_TARGET_AVX2 { return _mm256_loadu_ps(x + i); },
      [x](size_t i) { return x[i]; });
}

}  // namespace

const Kernels kAvx2Kernels = {collectAvx2};

}  // namespace gcagent::compress::sparse

#endif  // GC_CPU_X86

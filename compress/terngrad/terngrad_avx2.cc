// terngrad's loops for AVX2. Encoding takes eight elements at a time: the draws come from
// compress/cpu/random_avx2.h; clipping, the keep test (the same fp32 division and
// comparison) and the residual follow terngrad::encodeElement, and the codes are placed
// with mx2bit's table layout.
#include "compress/terngrad/terngrad_kernels.h"

#if GC_CPU_X86

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "compress/cpu/random_avx2.h"

namespace gcagent::compress::terngrad {
namespace {

// For a mask of 8 consecutive elements (bit j: element j), the low code bit of each set
// element at its place in two bytes: element j goes to byte j>>2 at shift 6 - 2*(j&3).
constexpr std::array<uint16_t, 256> makeLowBits() {
  std::array<uint16_t, 256> table{};
  for (uint32_t mask = 0; mask < 256; ++mask)
    for (uint32_t j = 0; j < 8; ++j)
      if (mask & (1u << j))
        table[mask] |= static_cast<uint16_t>(1u << (8 * (j >> 2) + 6 - 2 * (j & 3)));
  return table;
}
constexpr std::array<uint16_t, 256> kLowBits = makeLowBits();

template <bool kFeedback>
GC_TARGET_AVX2 void encodeAvx2(const float* g, float* r, uint8_t* codes, size_t begin, size_t end,
                               Scaler q, uint64_t stream) {
  const __m256 bound = _mm256_set1_ps(q.bound);
  const __m256 neg_bound = _mm256_set1_ps(-q.bound);
  const __m256 s = _mm256_set1_ps(q.s);
  const __m256 divisor = _mm256_set1_ps(q.s > 0.0f ? q.s : 1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  cpu::Uniform8 uniform(stream, begin);
  size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 x = _mm256_loadu_ps(g + i);
    if constexpr (kFeedback) x = _mm256_add_ps(x, _mm256_loadu_ps(r + i));  // g + r
    // clip: bound above it, -bound below -bound (neither holds for an infinite bound).
    __m256 xc = _mm256_blendv_ps(x, bound, _mm256_cmp_ps(x, bound, _CMP_GT_OQ));
    xc = _mm256_blendv_ps(xc, neg_bound, _mm256_cmp_ps(x, neg_bound, _CMP_LT_OQ));
    const __m256 ratio = _mm256_div_ps(_mm256_andnot_ps(sign, xc), divisor);
    const __m256 keep = _mm256_cmp_ps(uniform.next(), ratio, _CMP_LT_OQ);
    const __m256 negative = _mm256_cmp_ps(xc, _mm256_setzero_ps(), _CMP_LT_OQ);
    if constexpr (kFeedback) {
      // dequantize: s where kept, with the sign bit where also negative; +0 where dropped.
      const __m256 sent =
          _mm256_or_ps(_mm256_and_ps(keep, s), _mm256_and_ps(_mm256_and_ps(keep, negative), sign));
      _mm256_storeu_ps(r + i, _mm256_sub_ps(x, sent));
    }
    const auto kept = static_cast<uint32_t>(_mm256_movemask_ps(keep));
    const auto positive = kept & ~static_cast<uint32_t>(_mm256_movemask_ps(negative));
    // Code 11 (+s) or 10 (-s) where kept: the high bit for every kept one, the low for +s.
    const uint16_t two = static_cast<uint16_t>(kLowBits[positive] | (kLowBits[kept] << 1));
    std::memcpy(codes + i / 4, &two, 2);
  }
  for (size_t b = i / 4; b < (end + 3) / 4; ++b)
    codes[b] = encodeByte<kFeedback>(g, r, b, std::min<size_t>(4, end - 4 * b), q, stream);
}

// x of 4 elements.
template <bool kFeedback>
GC_TARGET_AVX2 inline __m128 input4(const float* g, const float* r) {
  const __m128 x = _mm_loadu_ps(g);
  if constexpr (kFeedback) return _mm_add_ps(x, _mm_loadu_ps(r));  // g + r
  return x;
}

// Four blocks side by side, as onebit's block sums: each lane's sum of squares is a chain
// of dependent double additions that must keep its order.
template <bool kFeedback>
GC_TARGET_AVX2 void blockStatsAvx2(const float* g, const float* r, size_t begin, size_t end,
                                   BlockStats* out) {
  constexpr size_t kSide = 4;
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  const size_t last = (end + kStatsBlock - 1) / kStatsBlock;
  for (size_t b = begin / kStatsBlock; b < last; b += kSide) {
    const size_t group = std::min(kSide, last - b);
    // A short group repeats its last block in the spare places; those results are dropped.
    size_t start[kSide], length[kSide];
    for (size_t j = 0; j < kSide; ++j) {
      start[j] = (b + std::min(j, group - 1)) * kStatsBlock;
      length[j] = std::min(end, start[j] + kStatsBlock) - start[j];
    }
    const size_t common = *std::min_element(length, length + kSide) / 4 * 4;
    __m256d squares[kSide];
    __m128 largest[kSide];
    for (size_t j = 0; j < kSide; ++j) {
      squares[j] = _mm256_setzero_pd();
      largest[j] = _mm_setzero_ps();
    }
    auto step = [&](size_t j, size_t i) GC_TARGET_AVX2 {
      const __m128 x = input4<kFeedback>(g + start[j] + i, kFeedback ? r + start[j] + i : nullptr);
      const __m256d wide = _mm256_cvtps_pd(x);
      squares[j] = _mm256_add_pd(squares[j], _mm256_mul_pd(wide, wide));
      // max_ps(a, l) is a > l ? a : l, the scalar loop's choice.
      largest[j] = _mm_max_ps(_mm_and_ps(x, abs_mask), largest[j]);
    };
    for (size_t i = 0; i < common; i += 4)
      for (size_t j = 0; j < kSide; ++j) step(j, i);
    for (size_t j = 0; j < group; ++j) {
      size_t i = common;
      for (; i + 4 <= length[j]; i += 4) step(j, i);
      double sq[4];
      float big[4];
      _mm256_storeu_pd(sq, squares[j]);
      _mm_storeu_ps(big, largest[j]);
      for (; i < length[j]; ++i) {
        const float x = inputAt<kFeedback>(g, r, start[j] + i);
        sq[0] += static_cast<double>(x) * x;
        big[0] = std::max(big[0], magnitude(x));
      }
      out[b + j] = {(sq[0] + sq[1]) + (sq[2] + sq[3]), *std::max_element(big, big + 4)};
    }
  }
}

}  // namespace

const Kernels kAvx2Kernels = {encodeAvx2<false>, encodeAvx2<true>, blockStatsAvx2<false>,
                              blockStatsAvx2<true>};

}  // namespace gcagent::compress::terngrad

#endif  // GC_CPU_X86

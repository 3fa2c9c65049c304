// qsgd's encoding loop for AVX2, eight elements at a time: the draws come from
// compress/cpu/random_avx2.h, and the level, its sign and the residual follow
// qsgd::encodeElement with the same fp32 division, multiplications and truncation.
#include "compress/qsgd/qsgd_kernels.h"

#if GC_CPU_X86

#include <immintrin.h>

#include <cstring>

#include "compress/cpu/random_avx2.h"
#include "compress/qsgd/qsgd_math.h"

namespace gcagent::compress::qsgd {
namespace {

template <bool kFeedback>
GC_TARGET_AVX2 void encodeAvx2(const float* g, float* r, int8_t* level, size_t begin, size_t end,
                               float norm, int32_t levels, uint64_t stream) {
  const float unit = unitOf(norm, levels);
  const __m256 vunit = _mm256_set1_ps(unit);
  const __m256 divisor = _mm256_set1_ps(norm > 0.0f ? norm : 1.0f);
  const __m256 vlevels = _mm256_set1_ps(static_cast<float>(levels));
  const __m256 sign = _mm256_set1_ps(-0.0f);
  cpu::Uniform8 uniform(stream, begin);
  size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 x = _mm256_loadu_ps(g + i);
    if constexpr (kFeedback) x = _mm256_add_ps(x, _mm256_loadu_ps(r + i));  // g + r
    const __m256 y = _mm256_mul_ps(_mm256_div_ps(_mm256_andnot_ps(sign, x), divisor), vlevels);
    const __m256i low = _mm256_cvttps_epi32(y);  // floor, as y >= 0
    const __m256 up =
        _mm256_cmp_ps(uniform.next(), _mm256_sub_ps(y, _mm256_cvtepi32_ps(low)), _CMP_LT_OQ);
    const __m256i magnitude = _mm256_sub_epi32(low, _mm256_castps_si256(up));  // + 1 where up
    const __m256i negative = _mm256_castps_si256(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
    const __m256i signed_level =
        _mm256_sub_epi32(_mm256_xor_si256(magnitude, negative), negative);  // -level where negative
    if constexpr (kFeedback)
      _mm256_storeu_ps(r + i,
                       _mm256_sub_ps(x, _mm256_mul_ps(vunit, _mm256_cvtepi32_ps(signed_level))));
    // Eight int32 in [-127, 127] to eight int8: packing saturates nothing.
    const __m256i words = _mm256_packs_epi32(signed_level, signed_level);
    const __m256i bytes = _mm256_packs_epi16(words, words);
    const __m256i both =
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    const auto eight = static_cast<uint64_t>(_mm_cvtsi128_si64(_mm256_castsi256_si128(both)));
    std::memcpy(level + i, &eight, 8);
  }
  for (; i < end; ++i) level[i] = encodeElement<kFeedback>(g, r, i, norm, unit, levels, stream);
}

}  // namespace

const Kernels kAvx2Kernels = {encodeAvx2<false>, encodeAvx2<true>};

}  // namespace gcagent::compress::qsgd

#endif  // GC_CPU_X86

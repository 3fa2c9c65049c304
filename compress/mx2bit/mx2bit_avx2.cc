// The 2-bit loops for AVX2. Eight elements at a time: the same fp32 additions and
// comparisons as mx2bit::quantize, then the two comparison masks are turned into codes with
// a 256-entry table instead of shifting every element into place.
#include "compress/mx2bit/mx2bit_kernels.h"

#if GC_CPU_X86

#include <immintrin.h>

#include <array>
#include <cstring>

#include "compress/mx2bit/mx2bit_math.h"

namespace gcagent::compress::mx2bit {
namespace {

// For a mask of 8 consecutive elements (bit j: element j), the low code bit of each set
// element at its place in two bytes: element j goes to byte j>>2 at shift 6 - 2*(j&3)
// (shiftOf, which is not constexpr).
constexpr std::array<uint16_t, 256> makeLowBits() {
  std::array<uint16_t, 256> table{};
  for (uint32_t mask = 0; mask < 256; ++mask)
    for (uint32_t j = 0; j < 8; ++j)
      if (mask & (1u << j))
        table[mask] |= static_cast<uint16_t>(1u << (8 * (j >> 2) + 6 - 2 * (j & 3)));
  return table;
}
constexpr std::array<uint16_t, 256> kLowBits = makeLowBits();

// Codes 11 (+t) and 10 (-t) share the high bit; only +t sets the low one.
inline uint32_t codesOf(uint32_t pos_mask, uint32_t neg_mask) {
  return kLowBits[pos_mask] | (kLowBits[pos_mask | neg_mask] << 1);
}

// Quantizes 8 elements as mx2bit::quantize does and returns their two code bytes. The
// threshold is above zero (the factory checks), so at most one of pos and neg holds.
GC_TARGET_AVX2 inline uint32_t encode8(const float* g, float* r, __m256 t, __m256 neg_t) {
  const __m256 x = _mm256_add_ps(_mm256_loadu_ps(r), _mm256_loadu_ps(g));
  const __m256 pos = _mm256_cmp_ps(x, t, _CMP_GE_OQ);
  const __m256 neg = _mm256_cmp_ps(x, neg_t, _CMP_LE_OQ);
  // x - t, x - (-t) (the same bits as x + t), or x - (+0), which leaves every x as it is
  // (-0 included) where adding +0 would not.
  const __m256 taken = _mm256_or_ps(_mm256_and_ps(pos, t), _mm256_and_ps(neg, neg_t));
  _mm256_storeu_ps(r, _mm256_sub_ps(x, taken));
  return codesOf(static_cast<uint32_t>(_mm256_movemask_ps(pos)),
                 static_cast<uint32_t>(_mm256_movemask_ps(neg)));
}

GC_TARGET_AVX2 void encodeAvx2(const float* g, float* r, uint8_t* dst, size_t begin, size_t end,
                               float t) {
  const __m256 vt = _mm256_set1_ps(t);
  const __m256 neg_t = _mm256_set1_ps(-t);
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    const uint32_t word =
        encode8(g + i, r + i, vt, neg_t) | (encode8(g + i + 8, r + i + 8, vt, neg_t) << 16);
    std::memcpy(dst + i / 4, &word, 4);
  }
  for (size_t b = i / 4; b < (end + 3) / 4; ++b) dst[b] = encodeByte(g, r, end, b, t);
}

// The values of 8 elements whose codes are the two bytes in the low half of `two_bytes`.
GC_TARGET_AVX2 inline __m256 decode8(uint32_t two_bytes, __m256 t, __m256 neg_t) {
  const __m256i shifts = _mm256_setr_epi32(6, 4, 2, 0, 14, 12, 10, 8);  // 8*(j>>2) + shiftOf(j)
  const __m256i codes =
      _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(two_bytes)), shifts),
                       _mm256_set1_epi32(3));
  const __m256 pos = _mm256_castsi256_ps(_mm256_cmpeq_epi32(codes, _mm256_set1_epi32(kCodePos)));
  const __m256 neg = _mm256_castsi256_ps(_mm256_cmpeq_epi32(codes, _mm256_set1_epi32(kCodeNeg)));
  // +t, -t, or +0 for codes 00 and 01, exactly what dequantize gives.
  return _mm256_or_ps(_mm256_and_ps(pos, t), _mm256_and_ps(neg, neg_t));
}

GC_TARGET_AVX2 inline void addTo(float* acc, __m256 v) {
  _mm256_storeu_ps(acc, _mm256_add_ps(_mm256_loadu_ps(acc), v));
}

GC_TARGET_AVX2 void decodeAddAvx2(const uint8_t* src, float* acc, size_t begin, size_t end,
                                  float t) {
  const __m256 vt = _mm256_set1_ps(t);
  const __m256 neg_t = _mm256_set1_ps(-t);
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    uint32_t word;
    std::memcpy(&word, src + i / 4, 4);
    addTo(acc + i, decode8(word & 0xffffu, vt, neg_t));
    addTo(acc + i + 8, decode8(word >> 16, vt, neg_t));
  }
  for (; i < end; ++i) acc[i] += dequantize((src[i >> 2] >> shiftOf(i)) & 3u, t);
}

GC_TARGET_AVX2 void decodeAvx2(const uint8_t* src, float* out, size_t begin, size_t end, float t) {
  const __m256 vt = _mm256_set1_ps(t);
  const __m256 neg_t = _mm256_set1_ps(-t);
  size_t i = begin;
  for (; i + 16 <= end; i += 16) {
    uint32_t word;
    std::memcpy(&word, src + i / 4, 4);
    _mm256_storeu_ps(out + i, decode8(word & 0xffffu, vt, neg_t));
    _mm256_storeu_ps(out + i + 8, decode8(word >> 16, vt, neg_t));
  }
  for (; i < end; ++i) out[i] = dequantize((src[i >> 2] >> shiftOf(i)) & 3u, t);
}

}  // namespace

const Kernels kAvx2Kernels = {encodeAvx2, decodeAddAvx2, decodeAvx2};

}  // namespace gcagent::compress::mx2bit

#endif  // GC_CPU_X86

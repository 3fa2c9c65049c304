// The 1-bit loops for AVX2. Eight elements at a time: the same fp32 addition and
// comparison as mx1bit::quantize; the comparison mask comes out LSB-first and a 256-entry
// table reverses it into MXNet's MSB-first byte.
#include "compress/mx1bit/mx1bit_kernels.h"

#if GC_CPU_X86

#include <immintrin.h>

#include <array>
#include <cstring>

#include "compress/cpu/bit_reversal.h"
#include "compress/mx1bit/mx1bit_math.h"

namespace gcagent::compress::mx1bit {
namespace {

using cpu::kReversedBytes;

// Quantizes 8 elements as mx1bit::quantize does and returns their byte.
GC_TARGET_AVX2 inline uint32_t encode8(const float* g, float* r, __m256 t) {
  const __m256 x = _mm256_add_ps(_mm256_loadu_ps(r), _mm256_loadu_ps(g));
  const __m256 above = _mm256_cmp_ps(x, t, _CMP_GT_OQ);
  // x - 1 where the bit is set, else x - (-1), the same bits as x + 1.
  const __m256 unit = _mm256_blendv_ps(_mm256_set1_ps(-1.0f), _mm256_set1_ps(1.0f), above);
  _mm256_storeu_ps(r, _mm256_sub_ps(x, unit));
  return kReversedBytes[static_cast<uint32_t>(_mm256_movemask_ps(above))];
}

GC_TARGET_AVX2 void encodeAvx2(const float* g, float* r, uint8_t* dst, size_t begin, size_t end,
                               float t) {
  const __m256 vt = _mm256_set1_ps(t);
  size_t i = begin;
  for (; i + 32 <= end; i += 32) {
    const uint32_t word = encode8(g + i, r + i, vt) | (encode8(g + i + 8, r + i + 8, vt) << 8) |
                          (encode8(g + i + 16, r + i + 16, vt) << 16) |
                          (encode8(g + i + 24, r + i + 24, vt) << 24);
    std::memcpy(dst + i / 8, &word, 4);
  }
  for (size_t b = i / 8; b < (end + 7) / 8; ++b) dst[b] = encodeByte(g, r, end, b, t);
}

// +1 or -1 for each of the 8 elements of `byte`, MSB first.
GC_TARGET_AVX2 inline __m256 decode8(uint32_t byte) {
  const __m256i masks = _mm256_setr_epi32(0x80, 0x40, 0x20, 0x10, 8, 4, 2, 1);  // maskOf(j)
  const __m256i set =
      _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(byte)), masks), masks);
  return _mm256_blendv_ps(_mm256_set1_ps(-1.0f), _mm256_set1_ps(1.0f), _mm256_castsi256_ps(set));
}

GC_TARGET_AVX2 void decodeAddAvx2(const uint8_t* src, float* acc, size_t begin, size_t end) {
  size_t i = begin;
  for (; i + 8 <= end; i += 8)
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), decode8(src[i / 8])));
  for (; i < end; ++i) acc[i] += dequantize(src[i >> 3] & maskOf(i));
}

}  // namespace

const Kernels kAvx2Kernels = {encodeAvx2, decodeAddAvx2};

}  // namespace gcagent::compress::mx1bit

#endif  // GC_CPU_X86

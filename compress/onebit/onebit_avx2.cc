// The onebit loops for AVX2.
//
// The scale's block sums keep the generic lane order (lane j of a block adds elements
// 4m + j one after another), which makes each block one long chain of dependent additions;
// four blocks summed side by side keep the adder busy without reordering any chain.
// Encoding takes eight elements at a time: the same fp32 addition, comparison and
// subtraction as onebit::encodeByte, and a 256-entry table turns the LSB-first comparison
// mask into the MSB-first byte. Decoding adds the same +-scale as onebit::dequantize.
#include "compress/onebit/onebit_kernels.h"

#if GC_CPU_X86

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "compress/cpu/bit_reversal.h"
#include "compress/onebit/onebit_math.h"

namespace gcagent::compress::onebit {
namespace {

// |g + e| of 4 elements, widened to double.
GC_TARGET_AVX2 inline __m256d magnitude4(const float* g, const float* e) {
  const __m128 x = _mm_add_ps(_mm_loadu_ps(g), _mm_loadu_ps(e));
  return _mm256_cvtps_pd(_mm_and_ps(x, _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff))));
}

GC_TARGET_AVX2 void blockSumsAvx2(const float* g, const float* e, size_t begin, size_t end,
                                  double* partial) {
  constexpr size_t kSide = 4;  // blocks summed side by side
  const size_t last = (end + kSumBlock - 1) / kSumBlock;
  for (size_t b = begin / kSumBlock; b < last; b += kSide) {
    const size_t group = std::min(kSide, last - b);
    // A short group repeats its last block in the spare places; those sums are dropped.
    size_t start[kSide], length[kSide];
    for (size_t j = 0; j < kSide; ++j) {
      start[j] = (b + std::min(j, group - 1)) * kSumBlock;
      length[j] = std::min(end, start[j] + kSumBlock) - start[j];
    }
    const size_t common = *std::min_element(length, length + kSide) / 8 * 8;
    __m256d acc[kSide];
    for (size_t j = 0; j < kSide; ++j) acc[j] = _mm256_setzero_pd();
    // Four floats per load: an eight-float load would need a lane extract per conversion,
    // on the same port as the conversions themselves, which already bound this loop.
    for (size_t i = 0; i < common; i += 8) {
      for (size_t j = 0; j < kSide; ++j) {
        acc[j] = _mm256_add_pd(acc[j], magnitude4(g + start[j] + i, e + start[j] + i));
        acc[j] = _mm256_add_pd(acc[j], magnitude4(g + start[j] + i + 4, e + start[j] + i + 4));
      }
    }
    for (size_t j = 0; j < group; ++j) {
      const float* gj = g + start[j];
      const float* ej = e + start[j];
      size_t i = common;
      for (; i + 4 <= length[j]; i += 4) acc[j] = _mm256_add_pd(acc[j], magnitude4(gj + i, ej + i));
      double lane[4];
      _mm256_storeu_pd(lane, acc[j]);
      for (; i < length[j]; ++i) lane[0] += magnitude(gj[i] + ej[i]);
      partial[b + j] = (lane[0] + lane[1]) + (lane[2] + lane[3]);
    }
  }
}

using cpu::kReversedBytes;

// Encodes 8 elements as onebit::encodeByte does and returns their byte.
GC_TARGET_AVX2 inline uint32_t encode8(const float* g, float* e, __m256 scale) {
  const __m256 x = _mm256_add_ps(_mm256_loadu_ps(g), _mm256_loadu_ps(e));
  const __m256 negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  // dequantize: the scale with its sign bit flipped where the bit is set.
  const __m256 decoded = _mm256_xor_ps(scale, _mm256_and_ps(negative, _mm256_set1_ps(-0.0f)));
  _mm256_storeu_ps(e, _mm256_sub_ps(x, decoded));
  return kReversedBytes[static_cast<uint32_t>(_mm256_movemask_ps(negative))];
}

GC_TARGET_AVX2 void encodeAvx2(const float* g, float* e, uint8_t* bits, size_t begin, size_t end,
                               float scale) {
  const __m256 vscale = _mm256_set1_ps(scale);
  size_t i = begin;
  for (; i + 32 <= end; i += 32) {
    const uint32_t word = encode8(g + i, e + i, vscale) |
                          (encode8(g + i + 8, e + i + 8, vscale) << 8) |
                          (encode8(g + i + 16, e + i + 16, vscale) << 16) |
                          (encode8(g + i + 24, e + i + 24, vscale) << 24);
    std::memcpy(bits + i / 8, &word, 4);
  }
  for (; i + 8 <= end; i += 8) bits[i / 8] = static_cast<uint8_t>(encode8(g + i, e + i, vscale));
  if (i < end) bits[i / 8] = encodeByte(g, e, i / 8, end - i, scale);
}

// Element j of a byte sits under 0x80 >> j: each lane tests its own bit.
GC_TARGET_AVX2 void decodeAddAvx2(const uint8_t* bits, float* acc, size_t begin, size_t end,
                                  float scale) {
  const __m256i lane_bit = _mm256_setr_epi32(0x80, 0x40, 0x20, 0x10, 0x08, 0x04, 0x02, 0x01);
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256i byte = _mm256_set1_epi32(bits[i / 8]);
    const __m256 set =
        _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(byte, lane_bit), lane_bit));
    const __m256 value = _mm256_xor_ps(vscale, _mm256_and_ps(set, sign));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), value));
  }
  for (; i < end; ++i) acc[i] += dequantize(bitAt(bits, i), scale);
}

}  // namespace

const Kernels kAvx2Kernels = {blockSumsAvx2, encodeAvx2, decodeAddAvx2};

}  // namespace gcagent::compress::onebit

#endif  // GC_CPU_X86

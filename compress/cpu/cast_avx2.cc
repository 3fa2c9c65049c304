// The cast loops compiled for AVX2. bf16 and fp32 are the shared loop bodies of
// cast_kernels.h, vectorised by the compiler for this target; fp16 uses the F16C
// conversions, which round to nearest even exactly like fp16::fromFloat for every non-NaN
// input (NaNs are made the same canonical quiet NaN below).
#include "compress/cpu/cast_kernels.h"

#if GC_CPU_X86

#include <immintrin.h>

namespace gcagent::compress {
namespace {

GC_TARGET_AVX2 void f32Encode(const float* g, float*, std::byte* dst, size_t begin, size_t end) {
  if (end > begin) std::memcpy(dst + 4 * begin, g + begin, 4 * (end - begin));
}

GC_TARGET_AVX2 void f32DecodeAdd(const std::byte* src, float* acc, size_t begin, size_t end) {
  f32DecodeAddLoop(src, acc, begin, end);
}

GC_TARGET_AVX2 void f32Decode(const std::byte* src, float* out, size_t begin, size_t end, float scale) {
  f32DecodeLoop(src, out, begin, end, scale);
}

GC_TARGET_AVX2 void bf16Decode(const std::byte* src, float* out, size_t begin, size_t end, float scale) {
  castDecodeLoop<Bf16Format>(src, out, begin, end, scale);
}

GC_TARGET_AVX2 void bf16Encode(const float* g, float* r, std::byte* dst, size_t begin, size_t end) {
  castEncodeLoop<Bf16Format>(g, r, dst, begin, end);
}

GC_TARGET_AVX2 void bf16DecodeAdd(const std::byte* src, float* acc, size_t begin, size_t end) {
  castDecodeAddLoop<Bf16Format>(src, acc, begin, end);
}

// Eight floats to halves. F16C keeps a NaN's sign and top payload bits, while
// fp16::fromFloat writes the quiet NaN 0x7e00 with the sign: replace every NaN half by that.
GC_TARGET_AVX2 inline __m128i fp16FromFloat8(__m256 x) {
  const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m128i magnitude = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
  const __m128i is_nan = _mm_cmpgt_epi16(magnitude, _mm_set1_epi16(0x7c00));
  const __m128i sign = _mm_xor_si128(h, magnitude);
  const __m128i quiet = _mm_or_si128(sign, _mm_set1_epi16(0x7e00));
  return _mm_blendv_epi8(h, quiet, is_nan);
}

GC_TARGET_AVX2 inline __m128i loadHalves(const std::byte* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

GC_TARGET_AVX2 inline void storeHalves(std::byte* p, __m128i h) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h);
}

GC_TARGET_AVX2 void fp16Encode(const float* g, float* r, std::byte* dst, size_t begin, size_t end) {
  size_t i = begin;
  if (r == nullptr) {
    for (; i + 8 <= end; i += 8) storeHalves(dst + 2 * i, fp16FromFloat8(_mm256_loadu_ps(g + i)));
  } else {
    for (; i + 8 <= end; i += 8) {
      const __m256 x = _mm256_add_ps(_mm256_loadu_ps(g + i), _mm256_loadu_ps(r + i));
      const __m128i h = fp16FromFloat8(x);
      _mm256_storeu_ps(r + i, _mm256_sub_ps(x, _mm256_cvtph_ps(h)));
      storeHalves(dst + 2 * i, h);
    }
  }
  castEncodeLoop<Fp16Format>(g, r, dst, i, end);  // the last few elements
}

GC_TARGET_AVX2 void fp16DecodeAdd(const std::byte* src, float* acc, size_t begin, size_t end) {
  size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m256 v = _mm256_cvtph_ps(loadHalves(src + 2 * i));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), v));
  }
  castDecodeAddLoop<Fp16Format>(src, acc, i, end);
}

GC_TARGET_AVX2 void fp16Decode(const std::byte* src, float* out, size_t begin, size_t end, float scale) {
  size_t i = begin;
  const __m256 identity = _mm256_set1_ps(-0.0f);  // adding -0.0 changes no value, keeps -0.0
  const __m256 s = _mm256_set1_ps(scale);
  for (; i + 8 <= end; i += 8) {
    const __m256 v = _mm256_add_ps(identity, _mm256_cvtph_ps(loadHalves(src + 2 * i)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, s));
  }
  castDecodeLoop<Fp16Format>(src, out, i, end, scale);
}

}  // namespace

namespace detail {
const CastKernels kF32Avx2Kernels = {f32Encode, f32DecodeAdd, f32Decode};
const CastKernels kFp16Avx2Kernels = {fp16Encode, fp16DecodeAdd, fp16Decode};
const CastKernels kBf16Avx2Kernels = {bf16Encode, bf16DecodeAdd, bf16Decode};
}  // namespace detail

}  // namespace gcagent::compress

#endif  // GC_CPU_X86

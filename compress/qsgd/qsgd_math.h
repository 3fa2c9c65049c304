// qsgd element math (Alistarh et al. 2017): with s levels and the L2 norm of its bucket,
// element x becomes the signed level sign(x) * l, where l = floor(s|x| / norm) rounded up to
// l + 1 with probability s|x|/norm - l, and decodes to (norm / s) * level, so E[decoded] = x.
#pragma once

#include "compress/feedback_math.h"
#include "compress/hd.h"
#include "compress/random_math.h"

namespace gcagent::compress::qsgd {

inline constexpr int32_t kMaxLevels = 127;  // a signed level fits one int8

GC_HD size_t bucketCount(size_t n, size_t bucket) { return (n + bucket - 1) / bucket; }

// One fp32 norm per bucket, then one int8 level per element.
GC_HD size_t encodedBytes(size_t n, size_t bucket) { return 4 * bucketCount(n, bucket) + n; }

GC_HD float magnitude(float x) { return floatOf(bitsOf(x) & 0x7fffffffu); }

// The signed level of x, from a uniform draw u in [0, 1). norm >= |x| (it is the norm of a
// bucket holding x), so |x| / norm <= 1 and the level never exceeds `levels`; norm == 0 only
// when every x of the bucket is 0, and dividing by 1 then keeps 0/0 out.
GC_HD int32_t quantize(float x, float norm, int32_t levels, float u) {
  const float y = magnitude(x) / (norm > 0.0f ? norm : 1.0f) * static_cast<float>(levels);
  const int32_t low = static_cast<int32_t>(y);  // floor, as y >= 0
  // Arithmetic rather than selects: branches on random draws would mispredict.
  const int32_t level = low + static_cast<int32_t>(u < y - static_cast<float>(low));
  const int32_t negative = static_cast<int32_t>(x < 0.0f);
  return (level ^ -negative) + negative;  // -level when negative
}

// The value of one level in a bucket.
GC_HD float unitOf(float norm, int32_t levels) { return norm / static_cast<float>(levels); }

GC_HD float dequantize(int32_t level, float unit) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(unit, static_cast<float>(level));  // rounded alone, never fused, as on the CPU
#else
  return unit * static_cast<float>(level);
#endif
}

// -levels <= level <= levels, as one unsigned comparison (no branch, so a check over every
// level vectorizes).
GC_HD bool isValidLevel(int32_t level, int32_t levels) {
  return static_cast<uint32_t>(level + levels) <= static_cast<uint32_t>(2 * levels);
}

// The level of element i in a bucket of the given norm; with error feedback r keeps what
// the level did not carry.
template <bool kFeedback>
GC_HD int8_t encodeElement(const float* g, float* r, size_t i, float norm, float unit,
                           int32_t levels, uint64_t stream) {
  const float x = inputAt<kFeedback>(g, r, i);
  const int32_t level = quantize(x, norm, levels, rng::uniform01(stream, i));
  if constexpr (kFeedback) r[i] = x - dequantize(level, unit);
  return static_cast<int8_t>(level);
}

// int8 (the same format, a bucket's largest magnitude as its scale): the level of element i
// rounded to the nearest (u = 1/2: a tie goes to the smaller magnitude), no random draw.
template <bool kFeedback>
GC_HD int8_t encodeNearest(const float* g, float* r, size_t i, float scale, float unit, int32_t levels) {
  const float x = inputAt<kFeedback>(g, r, i);
  const int32_t level = quantize(x, scale, levels, 0.5f);
  if constexpr (kFeedback) r[i] = x - dequantize(level, unit);
  return static_cast<int8_t>(level);
}

// The bits of |x| as an integer: their order is that of the magnitudes, with +inf above every
// finite value and NaN above +inf, so a bucket's largest is exact in any order and a
// non-finite input shows in it.
GC_HD uint32_t magnitudeBits(float x) { return bitsOf(x) & 0x7fffffffu; }

}  // namespace gcagent::compress::qsgd

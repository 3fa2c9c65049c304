// terngrad element math (Wen et al. 2017): x, clipped to [-bound, bound], becomes
// sign(x) * Bernoulli(|x| / s), where s = max |clipped x| over the slice, and decodes to s
// times that ternary, so E[decoded] is the clipped x. Codes use MXNet 2-bit's layout: element
// i in byte i>>2 at bit shift 6 - 2*(i&3); 3 (0b11) is +s, 2 (0b10) is -s, 0 is 0, and 1 is
// never written.
#pragma once

#include "compress/feedback_math.h"
#include "compress/hd.h"
#include "compress/random_math.h"

namespace gcagent::compress::terngrad {

inline constexpr size_t kHeaderBytes = 4;  // the fp32 scaler s
inline constexpr uint32_t kCodePos = 3u;
inline constexpr uint32_t kCodeNeg = 2u;

// The scaler, then the codes padded with zeros to whole 4-byte words.
GC_HD size_t encodedBytes(size_t n) { return kHeaderBytes + 4 * ((n + 15) / 16); }

GC_HD uint32_t shiftOf(size_t i) { return 6u - 2u * static_cast<uint32_t>(i & 3u); }

GC_HD float magnitude(float x) { return floatOf(bitsOf(x) & 0x7fffffffu); }

// What every element's code depends on besides itself, fixed once per slice.
struct Scaler {
  float bound;  // clipping bound; +inf when clipping is off
  float s;      // max |clipped x| over the slice
};

GC_HD float clip(float x, float bound) { return x > bound ? bound : (x < -bound ? -bound : x); }

// The code of sign(xc) kept with probability |xc| / s, from a uniform draw u in [0, 1): an
// element with |xc| == s is always sent, a zero never. Arithmetic rather than selects: the
// draws are random, so branches on them would mispredict half the time.
GC_HD uint32_t quantize(float xc, float s, float u) {
  // s == 0 only when every xc is 0; dividing by 1 then keeps 0/0 out and still gives 0.
  const uint32_t keep = static_cast<uint32_t>(u < magnitude(xc) / (s > 0.0f ? s : 1.0f));
  const uint32_t negative = static_cast<uint32_t>(xc < 0.0f);
  return keep * (kCodePos - negative);
}

// 0b11 -> s, 0b10 -> -s, 0b00 and 0b01 -> 0 (s >= 0, code <= 3): the high bit says whether s
// is sent, a clear low bit with it makes it negative.
GC_HD float dequantize(uint32_t code, float s) {
  const uint32_t sent = code >> 1;
  const uint32_t negative = sent & ~code;
  return floatOf((bitsOf(s) & (0u - sent)) | (negative << 31));
}

// The code of element i; with error feedback r keeps what the code did not carry.
template <bool kFeedback>
GC_HD uint32_t encodeElement(const float* g, float* r, size_t i, Scaler q, uint64_t stream) {
  const float x = inputAt<kFeedback>(g, r, i);
  const uint32_t code = quantize(clip(x, q.bound), q.s, rng::uniform01(stream, i));
  if constexpr (kFeedback) r[i] = x - dequantize(code, q.s);
  return code;
}

// Encodes elements 4b .. 4b+count-1 (count is 4 for every byte but the last).
template <bool kFeedback>
GC_HD uint8_t encodeByte(const float* g, float* r, size_t b, size_t count, Scaler q,
                         uint64_t stream) {
  uint32_t byte = 0;
  for (size_t j = 0; j < count; ++j)
    byte |= encodeElement<kFeedback>(g, r, 4 * b + j, q, stream) << shiftOf(j);
  return static_cast<uint8_t>(byte);
}

}  // namespace gcagent::compress::terngrad

// MXNet's 2-bit threshold quantizer (PR #8728), element by element. Element i of a slice
// lives in byte i>>2 at bit shift 6 - 2*(i&3); code 3 (0b11) is +t, 2 (0b10) is -t, 0 is
// zero, and 1 is never written and decodes to zero. Every 16 elements take 4 bytes.
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::mx2bit {

inline constexpr uint32_t kCodePos = 3u;
inline constexpr uint32_t kCodeNeg = 2u;

GC_HD size_t encodedBytes(size_t n) { return 4 * ((n + 15) / 16); }

GC_HD uint32_t shiftOf(size_t i) { return 6u - 2u * static_cast<uint32_t>(i & 3u); }

// Adds g into the residual r and takes at most one t out of it: r is never clamped.
GC_HD uint32_t quantize(float g, float& r, float t) {
  r += g;
  if (r >= t) {
    r -= t;
    return kCodePos;
  }
  if (r <= -t) {
    r += t;
    return kCodeNeg;
  }
  return 0u;
}

GC_HD float dequantize(uint32_t code, float t) {
  return code == kCodePos ? t : (code == kCodeNeg ? -t : 0.0f);
}

// Encodes the 4 elements that share byte b (elements 4b .. 4b+3, fewer at the tail).
GC_HD uint8_t encodeByte(const float* g, float* r, size_t n, size_t b, float t) {
  uint32_t byte = 0;
  for (size_t j = 0; j < 4; ++j) {
    const size_t i = 4 * b + j;
    if (i < n) byte |= quantize(g[i], r[i], t) << shiftOf(i);
  }
  return static_cast<uint8_t>(byte);
}

}  // namespace gcagent::compress::mx2bit

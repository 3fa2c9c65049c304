// MXNet's 1-bit quantizer (PR #17952), element by element. Bit 1 iff the residual after
// adding g exceeds t (strictly); the residual then gives up one unit (+1 or -1), and the
// bit decodes to +1 or -1. MSB first: element i is in byte i>>3 under mask 0x80 >> (i&7);
// every 32 elements take 4 bytes.
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::mx1bit {

GC_HD size_t encodedBytes(size_t n) { return 4 * ((n + 31) / 32); }

GC_HD uint32_t maskOf(size_t i) { return 0x80u >> (i & 7u); }

GC_HD uint32_t quantize(float g, float& r, float t) {
  r += g;
  if (r > t) {
    r -= 1.0f;
    return 1u;
  }
  r += 1.0f;
  return 0u;
}

GC_HD float dequantize(uint32_t bit) { return bit != 0 ? 1.0f : -1.0f; }

// Encodes the 8 elements that share byte b (fewer at the tail).
GC_HD uint8_t encodeByte(const float* g, float* r, size_t n, size_t b, float t) {
  uint32_t byte = 0;
  for (size_t j = 0; j < 8; ++j) {
    const size_t i = 8 * b + j;
    if (i < n && quantize(g[i], r[i], t) != 0) byte |= maskOf(i);
  }
  return static_cast<uint8_t>(byte);
}

}  // namespace gcagent::compress::mx1bit

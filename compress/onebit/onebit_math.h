// onebit element math (Seide et al. 2014; BytePS `onebit`): each element becomes its sign
// bit, set for x < 0, and decodes to -scale (set) or +scale (clear). Bits are MSB first:
// element i lives in byte i>>3 under mask 0x80 >> (i&7).
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::onebit {

inline constexpr size_t kHeaderBytes = 4;  // the fp32 scale

// The scale, then the bits padded with zeros to whole 4-byte words.
GC_HD size_t encodedBytes(size_t n) { return kHeaderBytes + 4 * ((n + 31) / 32); }

// Element i's bit (0 or 1) in the packed bits.
GC_HD uint32_t bitAt(const uint8_t* bits, size_t i) {
  return (bits[i >> 3] >> (7u - static_cast<uint32_t>(i & 7u))) & 1u;
}

GC_HD float magnitude(float x) { return floatOf(bitsOf(x) & 0x7fffffffu); }

// bit 1 -> -scale, 0 -> +scale (scale >= 0). Flipping the sign bit instead of selecting
// keeps random signs from costing a mispredicted branch each.
GC_HD float dequantize(uint32_t bit, float scale) { return floatOf(bitsOf(scale) ^ (bit << 31)); }

// Encodes elements 8b .. 8b+count-1 of x = g + e (count is 8 for every byte but the last)
// and leaves in e what the bits did not carry: e = x - decoded.
GC_HD uint8_t encodeByte(const float* g, float* e, size_t b, size_t count, float scale) {
  uint32_t byte = 0;
  for (size_t j = 0; j < count; ++j) {
    const size_t i = 8 * b + j;
    const float x = g[i] + e[i];
    const uint32_t negative = static_cast<uint32_t>(x < 0.0f);
    e[i] = x - dequantize(negative, scale);
    byte |= negative << (7u - static_cast<uint32_t>(j));
  }
  return static_cast<uint8_t>(byte);
}

}  // namespace gcagent::compress::onebit

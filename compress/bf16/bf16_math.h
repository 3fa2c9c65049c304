// bfloat16 conversion: the top 16 bits of an fp32, rounded to nearest even; NaN stays a
// quiet NaN, overflow rounds to infinity as in fp32.
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::bf16 {

GC_HD uint16_t fromFloat(float value) {
  const uint32_t u = bitsOf(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

GC_HD float toFloat(uint16_t b) { return floatOf(static_cast<uint32_t>(b) << 16); }

}  // namespace gcagent::compress::bf16

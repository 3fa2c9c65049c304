// IEEE binary16 conversion with round-to-nearest-even, in integer arithmetic so the host and
// the device give identical bits (after F. Giesen's float_to_half_fast3_rtne). Overflow
// gives infinity, NaN stays NaN (quiet), values below 2^-24 flush to signed zero.
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::fp16 {

GC_HD uint16_t fromFloat(float value) {
  const uint32_t f32_inf = 255u << 23;
  const uint32_t f16_max = (127u + 16u) << 23;  // 2^16: anything at or above overflows
  const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = bitsOf(value);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint32_t out;
  if (u >= f16_max) {
    out = u > f32_inf ? 0x7e00u : 0x7c00u;
  } else if (u < (113u << 23)) {
    // Subnormal half: let the fp32 adder do the rounding at the right position.
    out = bitsOf(floatOf(u) + floatOf(denorm_magic)) - denorm_magic;
  } else {
    const uint32_t mant_odd = (u >> 13) & 1u;
    u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;
    u += mant_odd;
    out = u >> 13;
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

GC_HD float toFloat(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    o += (128u - 16u) << 23;  // inf or NaN
  } else if (exp == 0) {
    o += 1u << 23;  // zero or subnormal: renormalise through the fp32 subtractor
    o = bitsOf(floatOf(o) - floatOf(113u << 23));
  }
  return floatOf(o | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

}  // namespace gcagent::compress::fp16

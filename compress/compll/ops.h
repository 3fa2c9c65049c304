// Element operations several definitions share, written over the lanes vocabulary. Included
// by the definitions only, never by compll's own headers: the AVX2 loops must parse it inside
// Highway's AVX2 region, as they parse the definitions (cpu/quantizer_kernels_avx2.cc).
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::compll {

// The value of a ternary 2-bit code (MXNet 2-bit's, TernGrad's): 3 (0b11) is +m, 2 (0b10) is
// -m, 0 and 1 are +0 (m >= 0). The high bit says m is sent, a clear low bit with it makes it
// negative: integer arithmetic instead of two selects, which random codes would mispredict.
template <class L>
GC_HD typename L::F ternaryValue(const L& l, typename L::U code, float m) {
  const auto sent = l.template shr<1>(code);
  const auto negative = l.andU(sent, l.xorU(code, l.u(1)));
  return l.fromBits(l.orU(l.andU(l.bits(l.f(m)), l.subU(l.u(0), sent)), l.template shl<31>(negative)));
}

}  // namespace gcagent::compress::compll

namespace gcagent::compress::compll {

// Small binary floating-point formats (fp8's e4m3 and e5m2, fp4's e2m1): kMant mantissa bits,
// smallest normal exponent kEmin (so the bias is 1 - kEmin), subnormals below it. A value's
// magnitude code is its exponent field << kMant | its mantissa; the sign is the caller's.

// The magnitude code nearest v (v >= 0, finite), ties to even, saturating at `max` (the
// format's largest finite magnitude). Adding c = 2^(e + 23 - kMant), e the exponent of v (at
// least kEmin), lets fp32's own rounding (to nearest, ties to even) round v to a multiple of
// the format's step 2^(e - kMant) there; subtracting c again is exact.
template <int kMant, int kEmin, class L>
GC_HD typename L::U miniFloatCode(const L& l, typename L::F v, float max) {
  const auto min_normal = l.f(floatOf(static_cast<uint32_t>(127 + kEmin) << 23));
  v = l.select(l.gt(v, l.f(max)), l.f(max), v);
  const auto exponent = l.andU(l.bits(l.select(l.lt(v, min_normal), min_normal, v)), l.u(0x7f800000u));
  const auto c = l.fromBits(l.addU(exponent, l.u(static_cast<uint32_t>(23 - kMant) << 23)));
  const auto q = l.sub(l.add(v, c), c);
  // Below the smallest normal, q + min_normal has q's mantissa in fp32's top kMant bits.
  const auto subnormal = l.lt(q, min_normal);
  const auto w = l.select(subnormal, l.add(q, min_normal), q);
  const auto rebias = l.select(subnormal, l.u(static_cast<uint32_t>(127 + kEmin) << kMant),
                               l.u(static_cast<uint32_t>(126 + kEmin) << kMant));
  return l.subU(l.template shr<23 - kMant>(l.bits(w)), rebias);
}

// The magnitude a code (sign bit clear) stands for: exact.
template <int kMant, int kEmin, class L>
GC_HD typename L::F miniFloatValue(const L& l, typename L::U code) {
  const auto subnormal = l.eq(l.template shr<kMant>(code), l.u(0));
  const auto rebias = l.select(subnormal, l.u(static_cast<uint32_t>(127 + kEmin) << 23),
                               l.u(static_cast<uint32_t>(126 + kEmin) << 23));
  const auto w = l.fromBits(l.addU(l.template shl<23 - kMant>(code), rebias));
  // A subnormal's w is 2^kEmin * (1 + mantissa / 2^kMant): take the leading 1 away again.
  return l.select(subnormal, l.sub(w, l.f(floatOf(static_cast<uint32_t>(127 + kEmin) << 23))), w);
}

}  // namespace gcagent::compress::compll

namespace gcagent::compress::compll {

// Sign-magnitude codes of kBits bits (fp8, fp4, int4): x's sign bit as the code's top bit, and
// a value given the sign its code's top bit names.
template <int kBits, class L>
GC_HD typename L::U signBit(const L& l, typename L::F x) {
  return l.template shr<32 - kBits>(l.andU(l.bits(x), l.u(0x80000000u)));
}
template <int kBits, class L>
GC_HD typename L::F withSign(const L& l, typename L::F magnitude, typename L::U code) {
  return l.fromBits(l.orU(l.bits(magnitude), l.template shl<32 - kBits>(l.andU(code, l.u(1u << (kBits - 1))))));
}

// v (0 <= v < 2^22) rounded to a whole number, ties to even: adding 2^23 leaves no fraction
// bits, so fp32's own rounding does it; the sum's low mantissa bits are then the number.
template <class L>
GC_HD typename L::F roundToWhole(const L& l, typename L::F v) {
  return l.sub(l.add(v, l.f(8388608.0f)), l.f(8388608.0f));
}
template <class L>
GC_HD typename L::U wholeToBits(const L& l, typename L::F q) {
  return l.subU(l.bits(l.add(q, l.f(8388608.0f))), l.u(0x4b000000u));
}
template <class L>
GC_HD typename L::F bitsToWhole(const L& l, typename L::U k) {
  return l.sub(l.fromBits(l.addU(l.u(0x4b000000u), k)), l.f(8388608.0f));
}

}  // namespace gcagent::compress::compll

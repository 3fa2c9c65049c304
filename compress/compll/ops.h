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

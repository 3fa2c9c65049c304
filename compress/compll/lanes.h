// The vocabulary a codec's element math is written in (CompLL's common operators at the
// level of one element): fp32 lanes F, u32 lanes U and masks M, with the few operations the
// codecs need. A definition's math is a template over a lanes type L and runs unchanged on
//   ScalarLanes  (this file): one element; the CUDA kernels and the CPU's slice tails, and
//   HwyLanes     (cpu/hwy_lanes-inl.h): a Highway vector of elements, the CPU's loops.
// Every operation is exact IEEE fp32 or integer arithmetic with no fused multiply-add, so the
// two give the same bits for the same element.
#pragma once

#include "compress/hd.h"

namespace gcagent::compress::compll {

struct ScalarLanes {
  using F = float;
  using U = uint32_t;
  using M = bool;

  GC_HD F f(float v) const { return v; }
  GC_HD U u(uint32_t v) const { return v; }

  // nvcc contracts a * b + c into one fused multiply-add unless told otherwise; the _rn
  // intrinsics are never contracted, so the device rounds each operation as the host does.
#if defined(__CUDA_ARCH__)
  GC_HD F add(F a, F b) const { return __fadd_rn(a, b); }
  GC_HD F sub(F a, F b) const { return __fsub_rn(a, b); }
  GC_HD F mul(F a, F b) const { return __fmul_rn(a, b); }
  GC_HD F div(F a, F b) const { return __fdiv_rn(a, b); }
#else
  GC_HD F add(F a, F b) const { return a + b; }
  GC_HD F sub(F a, F b) const { return a - b; }
  GC_HD F mul(F a, F b) const { return a * b; }
  GC_HD F div(F a, F b) const { return a / b; }
#endif
  GC_HD F abs(F a) const { return floatOf(bitsOf(a) & 0x7fffffffu); }

  GC_HD M ge(F a, F b) const { return a >= b; }
  GC_HD M gt(F a, F b) const { return a > b; }
  GC_HD M le(F a, F b) const { return a <= b; }
  GC_HD M lt(F a, F b) const { return a < b; }
  GC_HD M eq(U a, U b) const { return a == b; }
  GC_HD M both(M a, M b) const { return a && b; }

  GC_HD F select(M m, F a, F b) const { return m ? a : b; }
  GC_HD U select(M m, U a, U b) const { return m ? a : b; }
  // a where m holds, else +0 (cheaper than a select on most vector units).
  GC_HD F ifThen(M m, F a) const { return m ? a : 0.0f; }
  GC_HD U ifThen(M m, U a) const { return m ? a : 0u; }

  GC_HD U bits(F a) const { return bitsOf(a); }
  GC_HD F fromBits(U a) const { return floatOf(a); }
  GC_HD U addU(U a, U b) const { return a + b; }
  GC_HD U subU(U a, U b) const { return a - b; }
  GC_HD U andU(U a, U b) const { return a & b; }
  GC_HD U orU(U a, U b) const { return a | b; }
  GC_HD U xorU(U a, U b) const { return a ^ b; }
  template <int kShift>
  GC_HD U shl(U a) const { return a << kShift; }
  template <int kShift>
  GC_HD U shr(U a) const { return a >> kShift; }
};

}  // namespace gcagent::compress::compll

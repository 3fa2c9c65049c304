// ScalarLanes' vocabulary (compress/compll/lanes.h) over Highway vectors, for the CPU loops:
// the same definitions, a vector of elements at a time. Included once per Highway target
// (foreach_target), so it has no include guard of its own but Highway's toggle.
#if defined(GCAGENT_COMPRESS_COMPLL_CPU_HWY_LANES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GCAGENT_COMPRESS_COMPLL_CPU_HWY_LANES_INL_H_
#undef GCAGENT_COMPRESS_COMPLL_CPU_HWY_LANES_INL_H_
#else
#define GCAGENT_COMPRESS_COMPLL_CPU_HWY_LANES_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace gcagent::compress::compll::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

struct HwyLanes {
  using DF = hn::ScalableTag<float>;
  using DU = hn::RebindToUnsigned<DF>;
  using F = hn::Vec<DF>;
  using U = hn::Vec<DU>;
  using M = hn::Mask<DF>;
  DF df;
  DU du;

  HWY_INLINE F f(float v) const { return hn::Set(df, v); }
  HWY_INLINE U u(uint32_t v) const { return hn::Set(du, v); }

  HWY_INLINE F add(F a, F b) const { return hn::Add(a, b); }
  HWY_INLINE F sub(F a, F b) const { return hn::Sub(a, b); }
  HWY_INLINE F mul(F a, F b) const { return hn::Mul(a, b); }
  HWY_INLINE F div(F a, F b) const { return hn::Div(a, b); }
  HWY_INLINE F abs(F a) const { return hn::BitCast(df, hn::And(hn::BitCast(du, a), hn::Set(du, 0x7fffffffu))); }

  HWY_INLINE M ge(F a, F b) const { return hn::Ge(a, b); }
  HWY_INLINE M gt(F a, F b) const { return hn::Gt(a, b); }
  HWY_INLINE M le(F a, F b) const { return hn::Le(a, b); }
  HWY_INLINE M lt(F a, F b) const { return hn::Lt(a, b); }
  HWY_INLINE M eq(U a, U b) const { return hn::RebindMask(df, hn::Eq(a, b)); }
  HWY_INLINE M both(M a, M b) const { return hn::And(a, b); }

  HWY_INLINE F select(M m, F a, F b) const { return hn::IfThenElse(m, a, b); }
  HWY_INLINE U select(M m, U a, U b) const { return hn::IfThenElse(hn::RebindMask(du, m), a, b); }
  HWY_INLINE F ifThen(M m, F a) const { return hn::IfThenElseZero(m, a); }
  HWY_INLINE U ifThen(M m, U a) const { return hn::IfThenElseZero(hn::RebindMask(du, m), a); }

  HWY_INLINE U bits(F a) const { return hn::BitCast(du, a); }
  HWY_INLINE F fromBits(U a) const { return hn::BitCast(df, a); }
  HWY_INLINE U subU(U a, U b) const { return hn::Sub(a, b); }
  HWY_INLINE U andU(U a, U b) const { return hn::And(a, b); }
  HWY_INLINE U orU(U a, U b) const { return hn::Or(a, b); }
  HWY_INLINE U xorU(U a, U b) const { return hn::Xor(a, b); }
  template <int kShift>
  HWY_INLINE U shl(U a) const { return hn::ShiftLeft<kShift>(a); }
  template <int kShift>
  HWY_INLINE U shr(U a) const { return hn::ShiftRight<kShift>(a); }
};

}  // namespace gcagent::compress::compll::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include toggle

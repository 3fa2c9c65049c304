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

#include "compress/random_math.h"
#include "compress/compll/lanes.h"

HWY_BEFORE_NAMESPACE();
namespace gcagent::compress::compll::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ScalarLanes under a name of this target's own, so the definitions' math for the slice
// tails is instantiated apart for each target (each file compiles it for its own ISA).
struct TailLanes : ScalarLanes {};

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
  HWY_INLINE U addU(U a, U b) const { return hn::Add(a, b); }
  HWY_INLINE U subU(U a, U b) const { return hn::Sub(a, b); }
  HWY_INLINE U andU(U a, U b) const { return hn::And(a, b); }
  HWY_INLINE U orU(U a, U b) const { return hn::Or(a, b); }
  HWY_INLINE U xorU(U a, U b) const { return hn::Xor(a, b); }
  template <int kShift>
  HWY_INLINE U shl(U a) const { return hn::ShiftLeft<kShift>(a); }
  template <int kShift>
  HWY_INLINE U shr(U a) const { return hn::ShiftRight<kShift>(a); }
};

// rng::uniform01 (compress/random_math.h) for a vector of elements: lane j gets draw
// `first + j` of the stream, the bits the scalar draw gives. splitmix64 runs in 64-bit lanes,
// each product made of three 32-bit ones (exact modulo 2^64: most targets have no 64-bit
// multiply); two vectors of states make one vector of floats. (Highway's one-lane target,
// the baseline where GCC's EMU128 is broken, draws as the scalar code does.)
#if HWY_TARGET == HWY_SCALAR
struct HwyDraws {
  HwyLanes::DF df;
  HWY_INLINE HwyLanes::F at(uint64_t stream, size_t first) const { return hn::Set(df, rng::uniform01(stream, first)); }
};
#else
struct HwyDraws {
  using D64 = hn::Repartition<uint64_t, HwyLanes::DF>;
  using V64 = hn::Vec<D64>;
  D64 d64;
  HwyLanes::DU du;
  hn::RebindToSigned<HwyLanes::DU> di;
  HwyLanes::DF df;
  V64 steps_low, steps_high;  // j * golden for the lanes of each half

  HwyDraws() {
    steps_low = mul64(hn::Iota(d64, 0), rng::kGolden);
    steps_high = hn::Add(steps_low, hn::Set(d64, static_cast<uint64_t>(hn::Lanes(d64)) * rng::kGolden));
  }

  HWY_INLINE V64 mul64(V64 a, uint64_t c) const {
    const hn::Repartition<uint32_t, D64> d32;
    const V64 c_low = hn::Set(d64, c & 0xffffffffu), c_high = hn::Set(d64, c >> 32);
    const V64 low = hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, c_low));
    const V64 cross = hn::Add(hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, c_high)),
                              hn::MulEven(hn::BitCast(d32, hn::ShiftRight<32>(a)), hn::BitCast(d32, c_low)));
    return hn::Add(low, hn::ShiftLeft<32>(cross));
  }

  HWY_INLINE V64 mix64(V64 z) const {
    z = mul64(hn::Xor(z, hn::ShiftRight<30>(z)), 0xbf58476d1ce4e5b9ull);
    z = mul64(hn::Xor(z, hn::ShiftRight<27>(z)), 0x94d049bb133111ebull);
    return hn::Xor(z, hn::ShiftRight<31>(z));
  }

  HWY_INLINE HwyLanes::F at(uint64_t stream, size_t first) const {
    const V64 base = hn::Set(d64, stream + (static_cast<uint64_t>(first) + 1) * rng::kGolden);
    const V64 low = hn::ShiftRight<40>(mix64(hn::Add(base, steps_low)));
    const V64 high = hn::ShiftRight<40>(mix64(hn::Add(base, steps_high)));
    // The low 32 bits of each 64-bit lane are its even 32-bit lane: in element order.
    const auto bits = hn::ConcatEven(du, hn::BitCast(du, high), hn::BitCast(du, low));
    return hn::Mul(hn::ConvertTo(df, hn::BitCast(di, bits)), hn::Set(df, 0x1p-24f));
  }
};
#endif

}  // namespace gcagent::compress::compll::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include toggle

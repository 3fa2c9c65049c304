// A selecting definition's CPU pass over elements [begin, end) of a slice, one Highway target
// at a time (included by cpu/quantizer_kernels*.cc through foreach_target): the definition's
// update of a vector of elements, then its lanes whose |v| reaches the cut compressed into the
// index list. Four vectors are tested at once, and a group with no lane passing (the common
// case at the densities sparse codecs run at) costs one branch. The last elements, fewer than
// a vector, go through TailLanes: the same definition, so the same bits.
#if defined(GCAGENT_COMPRESS_COMPLL_CPU_SELECTOR_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GCAGENT_COMPRESS_COMPLL_CPU_SELECTOR_INL_H_
#undef GCAGENT_COMPRESS_COMPLL_CPU_SELECTOR_INL_H_
#else
#define GCAGENT_COMPRESS_COMPLL_CPU_SELECTOR_INL_H_
#endif

#include "compress/compll/cpu/hwy_lanes-inl.h"
#include "compress/compll/definition.h"
#include "compress/compll/selector_kernels.h"
#include "compress/sparse/sparse_math.h"

HWY_BEFORE_NAMESPACE();
namespace gcagent::compress::compll::HWY_NAMESPACE {

template <class Def, class L>
HWY_INLINE void updateElement(const L& l, typename L::F g, typename L::F& v, typename L::F& m,
                              const typename Def::Params& p) {
  if constexpr (kKeepsMoment<Def>) {
    Def::update(l, g, v, m, p);
  } else {
    (void)m;
    Def::update(l, g, v, p);
  }
}

// For each mask of N lanes, its set lanes' numbers packed to the front. The indices of a
// vector are first + lane, so its passing ones are the packed numbers plus first: no permute.
// (Highway 1.0's CompressStore would do, but g++ copies its 1 KiB table onto the stack at
// every call.)
template <size_t N>
struct Packs {
  uint8_t lanes[size_t{1} << N][N];
};

template <size_t N>
constexpr Packs<N> makePacks() {
  Packs<N> packs{};
  for (size_t mask = 0; mask < (size_t{1} << N); ++mask) {
    size_t count = 0;
    for (size_t lane = 0; lane < N; ++lane)
      if (mask & (size_t{1} << lane)) packs.lanes[mask][count++] = static_cast<uint8_t>(lane);
  }
  return packs;
}

template <size_t N>
inline constexpr Packs<N> kPacks = makePacks<N>();

// Stores first + lane for the lanes `pass` sets at out (a whole vector written), returns how many.
HWY_INLINE size_t storePassing(const HwyLanes& l, hn::Mask<HwyLanes::DU> pass, uint32_t first, uint32_t* out) {
  constexpr size_t kLanes = hn::MaxLanes(HwyLanes::DU());
  static_assert(kLanes <= 8, "a mask's bits fit one byte");
  uint8_t bits[8] = {};
  hn::StoreMaskBits(l.du, pass, bits);
  const hn::Rebind<uint8_t, HwyLanes::DU> d8;
  const auto lanes = hn::PromoteTo(l.du, hn::LoadU(d8, kPacks<kLanes>.lanes[bits[0]]));
  hn::StoreU(hn::Add(hn::Set(l.du, first), lanes), l.du, out);
  return hn::CountTrue(l.du, pass);
}

template <class Def>
size_t updateCollectRange(const float* HWY_RESTRICT g, float* HWY_RESTRICT v, float* HWY_RESTRICT m, size_t begin,
                          size_t end, const typename Def::Params& p, uint32_t key, uint32_t* HWY_RESTRICT out) {
  const HwyLanes l;
  const hn::RebindToSigned<HwyLanes::DF> di;
  const size_t lanes = hn::Lanes(l.df);
  // Keys are below 2^31, so a signed compare with key - 1 orders them (key 0: -1 lets all
  // pass; kCollectNone: 2^31 - 1 lets none).
  const auto below = hn::Set(di, static_cast<int32_t>(key - 1u));
  const auto magnitude = hn::Set(di, 0x7fffffff);
  const auto step = [&](size_t i) HWY_ATTR {
    auto vv = hn::LoadU(l.df, v + i);
    auto mm = kKeepsMoment<Def> ? hn::LoadU(l.df, m + i) : hn::Zero(l.df);
    updateElement<Def>(l, hn::LoadU(l.df, g + i), vv, mm, p);
    hn::StoreU(vv, l.df, v + i);
    if constexpr (kKeepsMoment<Def>) hn::StoreU(mm, l.df, m + i);
    return hn::RebindMask(l.du, hn::Gt(hn::And(hn::BitCast(di, vv), magnitude), below));
  };
  size_t count = 0;
  size_t i = begin;
  const auto at = [](size_t i) { return static_cast<uint32_t>(i); };
  for (; i + 4 * lanes <= end; i += 4 * lanes) {
    const auto m0 = step(i), m1 = step(i + lanes), m2 = step(i + 2 * lanes), m3 = step(i + 3 * lanes);
    if (hn::AllFalse(l.du, hn::Or(hn::Or(m0, m1), hn::Or(m2, m3)))) continue;
    count += storePassing(l, m0, at(i), out + count);
    count += storePassing(l, m1, at(i + lanes), out + count);
    count += storePassing(l, m2, at(i + 2 * lanes), out + count);
    count += storePassing(l, m3, at(i + 3 * lanes), out + count);
  }
  for (; i + lanes <= end; i += lanes) {
    const auto pass = step(i);
    if (!hn::AllFalse(l.du, pass)) count += storePassing(l, pass, at(i), out + count);
  }
  const TailLanes s;
  for (; i < end; ++i) {
    float vi = v[i], mi = kKeepsMoment<Def> ? m[i] : 0.0f;
    updateElement<Def>(s, g[i], vi, mi, p);
    v[i] = vi;
    if constexpr (kKeepsMoment<Def>) m[i] = mi;
    out[count] = static_cast<uint32_t>(i);
    count += sparse::magnitudeKey(vi) >= key ? 1 : 0;
  }
  return count;
}

template <class Def>
constexpr SelectorKernels<Def> selectorKernels() {
  return {updateCollectRange<Def>};
}

}  // namespace gcagent::compress::compll::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include toggle

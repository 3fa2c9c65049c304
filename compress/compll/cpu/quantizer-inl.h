// A quantizer definition's CPU loops over elements [begin, end) of a slice, one Highway
// target at a time (included by cpu/quantizer_kernels.cc through foreach_target). Whole
// vectors go through HwyLanes; the last elements of a range, fewer than a group, through
// ScalarLanes: the same definition, so the same bits. `begin` is a multiple of the codes'
// word (chunk edges never split a byte).
#if defined(GCAGENT_COMPRESS_COMPLL_CPU_QUANTIZER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef GCAGENT_COMPRESS_COMPLL_CPU_QUANTIZER_INL_H_
#undef GCAGENT_COMPRESS_COMPLL_CPU_QUANTIZER_INL_H_
#else
#define GCAGENT_COMPRESS_COMPLL_CPU_QUANTIZER_INL_H_
#endif

#include <cstring>

#include "compress/compll/cpu/hwy_lanes-inl.h"
#include "compress/compll/definition.h"
#include "compress/compll/lanes.h"
#include "compress/compll/cpu/selector-inl.h"
#include "compress/compll/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace gcagent::compress::compll::HWY_NAMESPACE {

// A definition's encode and decode with what it takes of the slice's scale and the element's
// draw (here, not in definition.h: the math must be compiled for this target).
template <class Def, class L>
HWY_INLINE auto encodeElement(const L& l, typename L::F g, typename L::F& r, const typename Def::Params& p,
                              float scale, typename L::F u) {
  if constexpr (kTakesScale<Def> && Stochastic<Def>) {
    return Def::encode(l, g, r, p, scale, u);
  } else if constexpr (kTakesScale<Def>) {
    return Def::encode(l, g, r, p, scale);
  } else if constexpr (Stochastic<Def>) {
    return Def::encode(l, g, r, p, u);
  } else {
    return Def::encode(l, g, r, p);
  }
}

template <class Def, class L>
HWY_INLINE auto decodeElement(const L& l, typename L::U code, const typename Def::Params& p, float scale) {
  if constexpr (kTakesScale<Def>) {
    return Def::decode(l, code, p, scale);
  } else {
    (void)scale;
    return Def::decode(l, code, p);
  }
}

// Elements a group holds: whole vectors and whole bytes of codes.
template <class Def>
constexpr size_t groupOf() {
  constexpr size_t lanes = hn::MaxLanes(HwyLanes::DF());
  constexpr size_t per_byte = Def::Codes::kPerByte;
  return lanes > per_byte ? lanes : per_byte;
}

// What an encoding range shares: the slice's (or block's) scale and stream, whether a
// residual is kept, whether draws are taken, and the index in the stream of element 0 of
// the arrays (not 0 when they are a block's own copy). The parameters are held by value: a
// reference could alias r, and the compiler would reload them after every store.
template <class Def, bool kFeedback>
struct RangeEncoder {
  using C = typename Def::Codes;
  const typename Def::Params p;
  float scale;
  uint64_t stream;
  bool drawing;
  size_t base;
  HwyLanes l;
  TailLanes s;
  HwyDraws draws;

  // The codes of the vector of elements from i, r[i ..] updated.
  HWY_INLINE HwyLanes::U vector(const float* HWY_RESTRICT g, float* HWY_RESTRICT r, size_t i) const {
    auto rv = kFeedback ? hn::LoadU(l.df, r + i) : hn::Zero(l.df);
    const auto u = drawing ? draws.at(stream, base + i) : hn::Zero(l.df);
    const auto code = encodeElement<Def>(l, hn::LoadU(l.df, g + i), rv, p, scale, u);
    if constexpr (kFeedback) hn::StoreU(rv, l.df, r + i);
    return code;
  }

  // The codes of the kPerWord elements from `at` (whole vectors), each lane's shifted to its
  // place in the word. Always inlined: as a lambda g++ kept one call of it out of line.
  HWY_INLINE HwyLanes::U word(const float* HWY_RESTRICT g, float* HWY_RESTRICT r, size_t at,
                              const uint32_t* HWY_RESTRICT places) const {
    auto word = hn::Zero(l.du);
    for (size_t v = 0; v < C::kPerWord; v += hn::Lanes(l.df))
      word = hn::Or(word, hn::Shl(vector(g, r, at + v), hn::Load(l.du, places + v)));
    return word;
  }

  // Byte b of the codes of elements [8b/kBits ..), from the elements below `end` only.
  HWY_INLINE uint8_t byte(const float* g, float* r, size_t b, size_t end) const {
    uint32_t byte = 0;
    for (size_t i = b * C::kPerByte; i < end && i < (b + 1) * C::kPerByte; ++i) {
      float ri = kFeedback ? r[i] : 0.0f;
      const float u = drawing ? rng::uniform01(stream, base + i) : 0.0f;
      byte |= encodeElement<Def>(s, g[i], ri, p, scale, u) << C::shift(i);
      if constexpr (kFeedback) r[i] = ri;
    }
    return static_cast<uint8_t>(byte);
  }
};

// Codes narrower than a byte: each word (kPerWord elements, whole vectors) is the OR of its
// vectors' codes, each lane's code shifted to its place in the little-endian word, summed
// across the lanes (the bits do not overlap, so the sum is their OR; stored as a u32, so the
// layout needs a little-endian CPU, as the rest of the wire format does). Byte codes: each lane's
// code narrowed to a byte and stored.
template <class Def, bool kFeedback>
void encodeRange(const float* HWY_RESTRICT g, float* HWY_RESTRICT r, uint8_t* HWY_RESTRICT codes,
                 size_t begin, size_t end, const typename Def::Params& p, float scale, uint64_t stream,
                 size_t base = 0) {
  using C = typename Def::Codes;
  const RangeEncoder<Def, kFeedback> e{p, scale, stream, Stochastic<Def> && takesDraws<Def>(p), base, {}, {}, {}};
  const size_t lanes = hn::Lanes(e.l.df);
  size_t i = begin;
  if constexpr (C::kBitsPerCode == 8) {
    const hn::Rebind<uint8_t, HwyLanes::DU> d8;
    for (; i + lanes <= end; i += lanes) hn::StoreU(hn::TruncateTo(d8, e.vector(g, r, i)), d8, codes + i);
  } else {
    static_assert(hn::MaxLanes(HwyLanes::DF()) <= C::kPerWord, "a word holds whole vectors");
    HWY_ALIGN uint32_t places[C::kPerWord];
    for (size_t k = 0; k < C::kPerWord; ++k)
      places[k] = static_cast<uint32_t>(8 * (k / C::kPerByte)) + C::shift(k);
#if HWY_TARGET != HWY_SCALAR
    constexpr size_t kMaxLanes = hn::MaxLanes(HwyLanes::DU());
    if constexpr (kMaxLanes == 4 || kMaxLanes == 8) {
      // Four words summed across their lanes together: two interleaving steps leave, in each
      // 128-bit block, the four words' sums over that block (and for eight lanes the two
      // blocks are added): a quarter of the shuffles of four sums apart.
      const hn::Repartition<uint64_t, HwyLanes::DU> d64;
      for (; i + 4 * C::kPerWord <= end; i += 4 * C::kPerWord) {
        const auto w0 = e.word(g, r, i, places), w1 = e.word(g, r, i + C::kPerWord, places);
        const auto w2 = e.word(g, r, i + 2 * C::kPerWord, places), w3 = e.word(g, r, i + 3 * C::kPerWord, places);
        const auto w01 = hn::BitCast(d64, hn::Add(hn::InterleaveLower(e.l.du, w0, w1), hn::InterleaveUpper(e.l.du, w0, w1)));
        const auto w23 = hn::BitCast(d64, hn::Add(hn::InterleaveLower(e.l.du, w2, w3), hn::InterleaveUpper(e.l.du, w2, w3)));
        const auto sums = hn::Add(hn::BitCast(e.l.du, hn::InterleaveLower(d64, w01, w23)),
                                  hn::BitCast(e.l.du, hn::InterleaveUpper(d64, w01, w23)));
        if constexpr (kMaxLanes == 8) {
          const hn::Half<HwyLanes::DU> dh;
          hn::StoreU(hn::Add(hn::LowerHalf(dh, sums), hn::UpperHalf(dh, sums)), dh,
                     reinterpret_cast<uint32_t*>(codes + i / C::kPerByte));
        } else {
          hn::StoreU(sums, e.l.du, reinterpret_cast<uint32_t*>(codes + i / C::kPerByte));
        }
      }
    }
#endif
    for (; i + C::kPerWord <= end; i += C::kPerWord) {
      const uint32_t bits = hn::GetLane(hn::SumOfLanes(e.l.du, e.word(g, r, i, places)));
      std::memcpy(codes + i / C::kPerByte, &bits, 4);
    }
  }
  for (size_t b = i / C::kPerByte; b < C::usedBytes(end); ++b) codes[b] = e.byte(g, r, b, end);
}

// Without a residual (r null) x is g + 0, and nothing is written back.
template <class Def>
void encodeAnyRange(const float* g, float* r, uint8_t* codes, size_t begin, size_t end,
                    const typename Def::Params& p, float scale, uint64_t stream) {
  if (r != nullptr) {
    encodeRange<Def, true>(g, r, codes, begin, end, p, scale, stream);
  } else {
    encodeRange<Def, false>(g, nullptr, codes, begin, end, p, scale, stream);
  }
}

// The codes of the `lanes` elements from element i (a multiple of the lane count) as u32 lanes.
template <class Def>
HWY_INLINE HwyLanes::U loadCodes(const HwyLanes& l, const uint8_t* codes, size_t i,
                                 const HwyLanes::U& lane_shifts) {
  using C = typename Def::Codes;
  constexpr size_t kLanes = hn::MaxLanes(HwyLanes::DF());
  static_assert(kLanes * C::kBitsPerCode <= 32 || C::kBitsPerCode == 8, "a vector's codes fit one u32");
  if constexpr (C::kBitsPerCode == 8) {
    const hn::Rebind<uint8_t, HwyLanes::DU> d8;
    return hn::PromoteTo(l.du, hn::LoadU(d8, codes + i));
  } else {
    constexpr size_t kBytes = kLanes * C::kBitsPerCode >= 8 ? kLanes * C::kBitsPerCode / 8 : 1;
    uint32_t word = 0;
    std::memcpy(&word, codes + i / C::kPerByte, kBytes);
    return hn::And(hn::Shr(hn::Set(l.du, word), lane_shifts), hn::Set(l.du, C::kMask));
  }
}

// Lane j's shift inside the u32 loadCodes reads for a vector starting at element i0 (i0 mod
// kPerByte selects the pattern when a byte holds more codes than a vector has lanes).
template <class Def>
HWY_INLINE void laneShifts(size_t i0, uint32_t* out, size_t lanes) {
  using C = typename Def::Codes;
  for (size_t j = 0; j < lanes; ++j) {
    const size_t i = i0 + j;
    out[j] = static_cast<uint32_t>(8 * (i / C::kPerByte - i0 / C::kPerByte)) + C::shift(i);
  }
}

// The parameters by value, so that the stores to `out` cannot alias them (see RangeEncoder).
template <class Def, bool kAdd>
void decodeRange(const uint8_t* HWY_RESTRICT codes, float* HWY_RESTRICT out, size_t begin, size_t end,
                 const typename Def::Params p, float scale, float factor) {
  using C = typename Def::Codes;
  const HwyLanes l;
  const size_t lanes = hn::Lanes(l.df);
  constexpr size_t kGroup = groupOf<Def>();
  HWY_ALIGN uint32_t shifts[kGroup];
  size_t i = begin;
  const auto vfactor = l.f(factor);
  for (size_t v = 0; v < kGroup; v += lanes) laneShifts<Def>(v, shifts + v, lanes);
  for (; i + kGroup <= end; i += kGroup) {
    for (size_t v = 0; v < kGroup; v += lanes) {
      const auto value = decodeElement<Def>(l, loadCodes<Def>(l, codes, i + v, hn::Load(l.du, shifts + v)), p, scale);
      if constexpr (kAdd) {
        hn::StoreU(hn::Add(hn::LoadU(l.df, out + i + v), value), l.df, out + i + v);
      } else {
        hn::StoreU(factor == 1.0f ? value : hn::Mul(value, vfactor), l.df, out + i + v);
      }
    }
  }
  const TailLanes s;
  for (; i < end; ++i) {
    const float value = decodeElement<Def>(s, C::at(codes, i), p, scale);
    if constexpr (kAdd) {
      out[i] += value;
    } else {
      out[i] = factor == 1.0f ? value : value * factor;
    }
  }
}

template <class Def>
void decodeAddRange(const uint8_t* HWY_RESTRICT codes, float* HWY_RESTRICT acc, size_t begin, size_t end,
                    const typename Def::Params& p, float scale) {
  decodeRange<Def, true>(codes, acc, begin, end, p, scale, 1.0f);
}

template <class Def>
void decodeScaledRange(const uint8_t* HWY_RESTRICT codes, float* HWY_RESTRICT out, size_t begin, size_t end,
                       const typename Def::Params& p, float scale, float factor) {
  decodeRange<Def, false>(codes, out, begin, end, p, scale, factor);
}

// The largest |x| of x = g + r (r null: g + 0) over [0, n), as fp32 bits with the sign
// cleared: compared as integers, an infinity (0x7f800000) or a NaN (above it) is larger than
// every finite value, so one maximum also finds them.
template <bool kFeedback>
HWY_INLINE uint32_t maxAbsBits(const float* HWY_RESTRICT g, const float* HWY_RESTRICT r, size_t n) {
  const HwyLanes l;
  const size_t lanes = hn::Lanes(l.df);
  const auto magnitude = l.u(0x7fffffffu);
  auto m = hn::Zero(l.du);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    auto x = hn::LoadU(l.df, g + i);
    if constexpr (kFeedback) x = hn::Add(x, hn::LoadU(l.df, r + i));
    m = hn::Max(m, hn::And(hn::BitCast(l.du, x), magnitude));
  }
  uint32_t out = hn::GetLane(hn::MaxOfLanes(l.du, m));
  for (; i < n; ++i) {
    const uint32_t b = bitsOf(g[i] + (kFeedback ? r[i] : 0.0f)) & 0x7fffffffu;
    out = b > out ? b : out;
  }
  return out;
}

// x <- H x over `size` elements (a power of two): the butterflies' stages in order.
HWY_INLINE void hadamard(float* x, uint32_t size) {
  for (uint32_t h = 1; h < size; h *= 2)
    for (uint32_t j = 0; j < size; j += 2 * h)
      for (uint32_t k = j; k < j + h; ++k) butterfly(x, k, h);
}

// A block's rotation, x <- H D x, D the signs the stream draws for elements base ..; and
// back, x <- D H x / size (H H = size I).
HWY_INLINE void rotate(float* x, uint32_t size, uint64_t stream, size_t base) {
  for (uint32_t j = 0; j < size; ++j) x[j] = floatOf(bitsOf(x[j]) ^ rotationSign(stream, base + j));
  hadamard(x, size);
}
HWY_INLINE void rotateBack(float* x, uint32_t size, uint64_t stream, size_t base) {
  hadamard(x, size);
  const float inverse = 1.0f / static_cast<float>(size);  // a power of two: exact
  for (uint32_t j = 0; j < size; ++j) x[j] = floatOf(bitsOf(x[j] * inverse) ^ rotationSign(stream, base + j));
}

// A rotated block's x (zeros past the slice's end), from elements b0 .. b0 + len.
template <bool kFeedback>
HWY_INLINE void rotatedBlock(const float* g, const float* r, size_t b0, size_t len, uint32_t size, uint64_t stream,
                             float* x) {
  for (size_t j = 0; j < size; ++j) x[j] = j < len ? g[b0 + j] + (kFeedback ? r[b0 + j] : 0.0f) : 0.0f;
  rotate(x, size, stream, b0);
}

// Block-scaled definitions: the scales of the blocks of [begin, end) (begin a block edge,
// end one too or the slice's end), block b's at scales + b * Scale::kBytes. Returns the first
// block holding a non-finite x, or SIZE_MAX.
template <class Def, bool kFeedback>
size_t blockScalesRange(const float* HWY_RESTRICT g, const float* HWY_RESTRICT r, uint8_t* HWY_RESTRICT scales,
                        size_t begin, size_t end, const typename Def::Params& p, uint64_t stream) {
  const uint32_t size = Def::block(p);
  HWY_ALIGN float x[kMaxBlock];
  for (size_t b0 = begin; b0 < end; b0 += size) {
    const size_t len = end - b0 < size ? end - b0 : size;
    uint32_t max_bits;
    if (rotates<Def>(p)) {
      rotatedBlock<kFeedback>(g, r, b0, len, size, stream, x);
      max_bits = maxAbsBits<false>(x, nullptr, size);
    } else {
      max_bits = maxAbsBits<kFeedback>(g + b0, kFeedback ? r + b0 : nullptr, len);
    }
    if (max_bits >= 0x7f800000u) return b0 / size;
    Def::Scale::store(scales + b0 / size * Def::Scale::kBytes, Def::blockScale(floatOf(max_bits), p));
  }
  return SIZE_MAX;
}

// The codes of the blocks of [begin, end) with their scales (as stored), r updated. A
// rotated block is coded whole, the last one too.
template <class Def, bool kFeedback>
void encodeBlocksRange(const float* HWY_RESTRICT g, float* HWY_RESTRICT r, const uint8_t* HWY_RESTRICT scales,
                       uint8_t* HWY_RESTRICT codes, size_t begin, size_t end, const typename Def::Params& p,
                       uint64_t stream) {
  using C = typename Def::Codes;
  const uint32_t size = Def::block(p);
  HWY_ALIGN float x[kMaxBlock];
  HWY_ALIGN float e[kMaxBlock];
  for (size_t b0 = begin; b0 < end; b0 += size) {
    const size_t len = end - b0 < size ? end - b0 : size;
    const float scale = Def::Scale::load(scales + b0 / size * Def::Scale::kBytes);
    if (!rotates<Def>(p)) {
      encodeRange<Def, kFeedback>(g, r, codes, b0, b0 + len, p, scale, stream);
      continue;
    }
    rotatedBlock<kFeedback>(g, r, b0, len, size, stream, x);
    for (uint32_t j = 0; j < size; ++j) e[j] = 0.0f;
    encodeRange<Def, true>(x, e, codes + b0 / C::kPerByte, 0, size, p, scale, stream, b0);
    if constexpr (kFeedback) {
      rotateBack(e, size, stream, b0);
      for (size_t j = 0; j < len; ++j) r[b0 + j] = e[j];
    }
  }
}

template <class Def>
size_t blockScalesAnyRange(const float* g, const float* r, uint8_t* scales, size_t begin, size_t end,
                           const typename Def::Params& p, uint64_t stream) {
  if (r != nullptr) return blockScalesRange<Def, true>(g, r, scales, begin, end, p, stream);
  return blockScalesRange<Def, false>(g, nullptr, scales, begin, end, p, stream);
}

template <class Def>
void encodeBlocksAnyRange(const float* g, float* r, const uint8_t* scales, uint8_t* codes, size_t begin, size_t end,
                          const typename Def::Params& p, uint64_t stream) {
  if (r != nullptr) {
    encodeBlocksRange<Def, true>(g, r, scales, codes, begin, end, p, stream);
  } else {
    encodeBlocksRange<Def, false>(g, nullptr, scales, codes, begin, end, p, stream);
  }
}

// out[i] (+)= element i's value (times factor when not adding) over the blocks of [begin, end).
template <class Def>
void decodeBlocksRange(const uint8_t* HWY_RESTRICT scales, const uint8_t* HWY_RESTRICT codes, float* HWY_RESTRICT out,
                       size_t begin, size_t end, const typename Def::Params& p, uint64_t stream, float factor,
                       bool add) {
  using C = typename Def::Codes;
  const uint32_t size = Def::block(p);
  HWY_ALIGN float y[kMaxBlock];
  for (size_t b0 = begin; b0 < end; b0 += size) {
    const size_t len = end - b0 < size ? end - b0 : size;
    const float scale = Def::Scale::load(scales + b0 / size * Def::Scale::kBytes);
    if (!rotates<Def>(p)) {
      if (add) {
        decodeRange<Def, true>(codes, out, b0, b0 + len, p, scale, 1.0f);
      } else {
        decodeRange<Def, false>(codes, out, b0, b0 + len, p, scale, factor);
      }
      continue;
    }
    decodeRange<Def, false>(codes + b0 / C::kPerByte, y, 0, size, p, scale, 1.0f);
    rotateBack(y, size, stream, b0);
    for (size_t j = 0; j < len; ++j) {
      if (add) {
        out[b0 + j] += y[j];
      } else {
        out[b0 + j] = factor == 1.0f ? y[j] : y[j] * factor;
      }
    }
  }
}

template <class Def>
constexpr QuantizerKernels<Def> quantizerKernels() {
  if constexpr (BlockScaled<Def>) {
    return {encodeAnyRange<Def>, decodeAddRange<Def>, decodeScaledRange<Def>, blockScalesAnyRange<Def>,
            encodeBlocksAnyRange<Def>, decodeBlocksRange<Def>};
  } else {
    return {encodeAnyRange<Def>, decodeAddRange<Def>, decodeScaledRange<Def>, nullptr, nullptr, nullptr};
  }
}

// A definition's loops, whichever kind it is.
template <class Def>
constexpr KernelsOf<Def> definitionKernels() {
  if constexpr (Selecting<Def>) {
    return selectorKernels<Def>();
  } else {
    return quantizerKernels<Def>();
  }
}

}  // namespace gcagent::compress::compll::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include toggle

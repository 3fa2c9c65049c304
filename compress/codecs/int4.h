// int4: each element of x = g + r as an integer level -7 .. 7 of s = the block's largest |x|
// / 7, one fp32 scale per block, rounded to the nearest level (ties to even) or
// stochastically (up with probability equal to the remainder, from counter-based draws keyed
// by (seed, key, slice, step, element): unbiased). With rotate, each block is first turned by
// a random sign flip and the Walsh-Hadamard transform (as SDP4Bit does before its 4-bit
// quantization), seeded by the slice, which spreads an outlier over the block; the decoder
// turns it back. Codes: sign bit, then the level's 3 bits. The residual keeps x - decoded.
#pragma once

#include "compress/compll/definition.h"
#include "compress/compll/ops.h"

namespace gcagent::compress::codecs {

struct Int4 {
  static constexpr std::string_view kName = "int4";
  static constexpr std::string_view kSummary = "4-bit levels with an fp32 scale per block, optionally Hadamard-rotated";
  using Codes = compll::Codes<4>;
  using Scale = compll::Fp32Scale;
  static constexpr bool kPaddingChecked = true;

  struct Params {
    uint32_t block;
    bool stochastic;
    bool rotate;
    uint64_t seed;
  };
  static Params read(ParamReader& reader) {
    return {reader.blockSize("block", 64, "elements per fp32 scale (32, 64, 128 or 256)"),
            reader.boolean("stochastic", false, "round stochastically (unbiased) instead of to the nearest level"),
            reader.boolean("rotate", false, "send each block after a randomized Hadamard rotation"),
            reader.seed("seed", 0, "seed of the rotation's signs and the stochastic rounding")};
  }
  GC_HD static uint32_t block(const Params& p) { return p.block; }
  GC_HD static bool rotates(const Params& p) { return p.rotate; }
  GC_HD static bool draws(const Params& p) { return p.stochastic; }
  static uint64_t stream(const Params& p, uint64_t key, uint32_t slice, uint64_t step) {
    return rng::streamSeed(p.seed, key, slice, step);
  }
  GC_HD static float blockScale(float max_abs, const Params&) { return max_abs / 7.0f; }

  template <class L>
  GC_HD static typename L::U encode(const L& l, typename L::F g, typename L::F& r, const Params& p, float s,
                                    typename L::F u) {
    const auto x = l.add(g, r);
    auto v = l.div(l.abs(x), l.f(s > 0.0f ? s : 1.0f));  // s is 0 only when every x is
    v = l.select(l.gt(v, l.f(7.0f)), l.f(7.0f), v);
    auto q = compll::roundToWhole(l, v);
    if (p.stochastic) {
      const auto down = l.select(l.gt(q, v), l.sub(q, l.f(1.0f)), q);
      q = l.add(down, l.ifThen(l.lt(u, l.sub(v, down)), l.f(1.0f)));
    }
    const auto code = l.orU(compll::wholeToBits(l, q), compll::signBit<4>(l, x));
    r = l.sub(x, decode(l, code, p, s));
    return code;
  }

  template <class L>
  GC_HD static typename L::F decode(const L& l, typename L::U code, const Params&, float s) {
    return compll::withSign<4>(l, l.mul(compll::bitsToWhole(l, l.andU(code, l.u(7))), l.f(s)), code);
  }
};

}  // namespace gcagent::compress::codecs

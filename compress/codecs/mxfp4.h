// mxfp4: OCP Microscaling FP4 (MX spec v1.0): each element of x = g + r as an fp4 e2m1
// number (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) of x / X, with one shared
// power-of-two scale X = 2^(floor(log2 max|x|) - 2) per block of 32 (the spec's block; the
// `block` parameter allows others), sent as an E8M0 byte. Rounding to the nearest value, ties
// to even; quotients past 6 (up to 8) saturate to 6, as the spec's conversion does. With
// rotate, blocks are Hadamard-rotated as int4's. A block holding a non-finite x fails the
// encode. The residual keeps x - decoded.
#pragma once

#include "compress/compll/definition.h"
#include "compress/compll/ops.h"

namespace gcagent::compress::codecs {

struct Mxfp4 {
  static constexpr std::string_view kName = "mxfp4";
  static constexpr std::string_view kSummary = "OCP MX fp4 (e2m1) with a power-of-two scale per 32 elements";
  using Codes = compll::Codes<4>;
  using Scale = compll::Pow2Scale;
  static constexpr bool kPaddingChecked = true;

  struct Params {
    uint32_t block;
    bool rotate;
    uint64_t seed;
  };
  static Params read(ParamReader& reader) {
    return {reader.blockSize("block", 32, "elements per shared exponent (32, 64, 128 or 256)"),
            reader.boolean("rotate", false, "send each block after a randomized Hadamard rotation"),
            reader.seed("seed", 0, "seed of the rotation's signs")};
  }
  GC_HD static uint32_t block(const Params& p) { return p.block; }
  GC_HD static bool rotates(const Params& p) { return p.rotate; }
  GC_HD static bool draws(const Params&) { return false; }
  static uint64_t stream(const Params& p, uint64_t key, uint32_t slice, uint64_t step) {
    return rng::streamSeed(p.seed, key, slice, step);
  }
  // 2^(floor(log2 max_abs) - 2): e2m1's largest exponent is 2. Kept within E8M0's 2^-126 ..
  // 2^127 (a block below 2^-124 uses 2^-126 and rounds into e2m1's subnormal half).
  GC_HD static float blockScale(float max_abs, const Params&) {
    const uint32_t e = bitsOf(max_abs) >> 23;
    return floatOf((e > 3 ? e - 2 : 1u) << 23);
  }

  template <class L>
  GC_HD static typename L::U encode(const L& l, typename L::F g, typename L::F& r, const Params& p, float s,
                                    typename L::F) {
    const auto x = l.add(g, r);
    const auto magnitude = compll::miniFloatCode<1, 0>(l, l.div(l.abs(x), l.f(s)), 6.0f);
    const auto code = l.orU(magnitude, compll::signBit<4>(l, x));
    r = l.sub(x, decode(l, code, p, s));
    return code;
  }

  template <class L>
  GC_HD static typename L::F decode(const L& l, typename L::U code, const Params&, float s) {
    const auto value = compll::miniFloatValue<1, 0>(l, l.andU(code, l.u(7)));
    return compll::withSign<4>(l, l.mul(value, l.f(s)), code);
  }
};

}  // namespace gcagent::compress::codecs

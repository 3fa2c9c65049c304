// fp8: each element of x = g + r as an OCP fp8 number (e4m3, or e5m2 with exponent_bits 5)
// of x / s, one fp32 scale s per block of `block` elements: the block's largest |x| over the
// format's largest finite value (448 or 57344), so the block's largest element lands on it
// (the row-wise scaling NCCL's and torchft's fp8 all-reduces use, per block). Rounding is to
// the nearest value, ties to even; a quotient past the largest finite value (an fp32 rounding
// of the division) saturates to it, and infinities and NaN are never written: a block holding
// a non-finite x fails the encode, and a NaN or infinity code fails the decode. An all-zero
// block has scale 0. The residual keeps x - decoded.
#pragma once

#include "compress/compll/definition.h"
#include "compress/compll/ops.h"

namespace gcagent::compress::codecs {

struct Fp8 {
  static constexpr std::string_view kName = "fp8";
  static constexpr std::string_view kSummary = "fp8 (e4m3 or e5m2) with an fp32 scale per block";
  using Codes = compll::Codes<8>;
  using Scale = compll::Fp32Scale;
  static constexpr bool kPaddingChecked = true;

  struct Params {
    bool e5m2;
    uint32_t block;
  };
  static Params read(ParamReader& reader) {
    const auto exponent = reader.integer("exponent_bits", 4, Range::closed(4, 5), "4: e4m3 (max 448), 5: e5m2 (max 57344)");
    return {exponent == 5, reader.blockSize("block", 32, "elements per fp32 scale (32, 64, 128 or 256)")};
  }
  GC_HD static uint32_t block(const Params& p) { return p.block; }
  GC_HD static float largest(const Params& p) { return p.e5m2 ? 57344.0f : 448.0f; }
  GC_HD static float blockScale(float max_abs, const Params& p) { return max_abs / largest(p); }

  template <class L>
  GC_HD static typename L::U encode(const L& l, typename L::F g, typename L::F& r, const Params& p, float s) {
    const auto x = l.add(g, r);
    const auto v = l.div(l.abs(x), l.f(s > 0.0f ? s : 1.0f));  // s is 0 only when every x is
    const auto magnitude = p.e5m2 ? compll::miniFloatCode<2, -14>(l, v, 57344.0f)
                                  : compll::miniFloatCode<3, -6>(l, v, 448.0f);
    const auto code = l.orU(magnitude, compll::signBit<8>(l, x));
    r = l.sub(x, decode(l, code, p, s));
    return code;
  }

  template <class L>
  GC_HD static typename L::F decode(const L& l, typename L::U code, const Params& p, float s) {
    const auto magnitude = l.andU(code, l.u(0x7f));
    const auto value = p.e5m2 ? compll::miniFloatValue<2, -14>(l, magnitude) : compll::miniFloatValue<3, -6>(l, magnitude);
    return compll::withSign<8>(l, l.mul(value, l.f(s)), code);
  }

  // NaN and infinity: e4m3's one NaN magnitude (0x7f), e5m2's top exponent (0x7c ..).
  GC_HD static uint32_t unwrittenMask(const Params& p) { return p.e5m2 ? 0x7cu : 0x7fu; }
};

}  // namespace gcagent::compress::codecs

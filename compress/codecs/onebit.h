// onebit: 1-bit SGD (Seide et al. 2014; BytePS `onebit`). Each element of x = g + r is sent
// as its sign: bit 1 for x < 0 (decodes to -scale), 0 for x >= 0 (+scale), where scale is the
// slice's mean magnitude sum|x| / n (0 for an empty slice), or 1 with scaled=false. Every
// element is sent, so the residual r = x - decoded keeps the rest: decoded + r_new equals
// g + r_old up to one fp32 rounding. Bits follow MXNet 1-bit's layout, after the scale.
#pragma once

#include "compress/compll/definition.h"

namespace gcagent::compress::codecs {

struct Onebit {
  static constexpr std::string_view kName = "onebit";
  static constexpr std::string_view kSummary = "sign and mean-magnitude scale with error feedback";
  using Codes = compll::Codes<1>;
  static constexpr bool kPaddingChecked = true;

  struct Params {
    bool scaled;
  };
  static Params read(ParamReader& reader) {
    return {reader.boolean("scaled", true, "scale the signs by the mean magnitude (false: plain signs)")};
  }

  static unsigned stats(const Params& p) { return p.scaled ? compll::kSumAbs : 0u; }
  GC_HD static float scale(const compll::SliceStats& s, size_t n, const Params& p) {
    if (!p.scaled) return 1.0f;
    return n == 0 ? 0.0f : static_cast<float>(s.sum_abs / static_cast<double>(n));
  }

  template <class L>
  GC_HD static typename L::U encode(const L& l, typename L::F g, typename L::F& r, const Params& p, float scale) {
    const auto x = l.add(g, r);
    const auto negative = l.ifThen(l.lt(x, l.f(0.0f)), l.u(1));
    r = l.sub(x, decode(l, negative, p, scale));
    return negative;
  }

  // The sign bit flipped rather than a select: random signs would mispredict a branch.
  template <class L>
  GC_HD static typename L::F decode(const L& l, typename L::U code, const Params&, float scale) {
    return l.fromBits(l.xorU(l.bits(l.f(scale)), l.template shl<31>(code)));
  }
};

}  // namespace gcagent::compress::codecs

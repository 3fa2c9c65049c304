// 1bit: MXNet's 1-bit quantizer (PR #17952). Bit 1 iff the residual after adding the gradient
// exceeds t (strictly); the residual then gives up one unit (+1 for a set bit, -1 for a
// clear one), which the bit decodes to. Eight elements to a byte, MSB first.
#pragma once

#include "compress/compll/definition.h"

namespace gcagent::compress::codecs {

struct Mx1bit {
  static constexpr std::string_view kName = "1bit";
  static constexpr std::string_view kSummary = "MXNet 1-bit quantizer with residual";
  using Codes = compll::Codes<1>;

  struct Params {
    float t;
  };
  static Params read(ParamReader& reader) {
    return {reader.real32("threshold", 0.0f, Range::any(),
                          "elements above it are sent as +1, the rest as -1 (MXNet's 1-bit)")};
  }

  template <class L>
  GC_HD static typename L::U encode(const L& l, typename L::F g, typename L::F& r, const Params& p) {
    const auto x = l.add(r, g);
    const auto set = l.gt(x, l.f(p.t));
    r = l.sub(x, l.select(set, l.f(1.0f), l.f(-1.0f)));
    return l.select(set, l.u(1), l.u(0));
  }

  template <class L>
  GC_HD static typename L::F decode(const L& l, typename L::U code, const Params&) {
    return l.select(l.eq(code, l.u(1)), l.f(1.0f), l.f(-1.0f));
  }
};

}  // namespace gcagent::compress::codecs

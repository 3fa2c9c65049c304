// 2bit: MXNet's 2-bit threshold quantizer (PR #8728). The gradient is added into the
// residual, and at most one threshold t is taken out of it per step: code 3 (0b11) sends +t,
// 2 (0b10) sends -t, 0 sends nothing (1 is never written and decodes to zero). The residual
// is never clamped. Four elements to a byte, MSB first; 16 to a 4-byte word.
#pragma once

#include "compress/compll/definition.h"
#include "compress/compll/ops.h"

namespace gcagent::compress::codecs {

struct Mx2bit {
  static constexpr std::string_view kName = "2bit";
  static constexpr std::string_view kSummary = "MXNet 2-bit threshold quantizer with residual";
  using Codes = compll::Codes<2>;
  static constexpr uint32_t kPos = 3, kNeg = 2;

  struct Params {
    float t;
  };
  static Params read(ParamReader& reader) {
    return {reader.real32("threshold", 0.5f, Range::above(0),
        "an element is sent as +/-threshold once its residual-accumulated magnitude reaches it; pick it near the typical gradient magnitude (0.5 leaves small models untrained)")};
  }

  template <class L>
  GC_HD static typename L::U encode(const L& l, typename L::F g, typename L::F& r, const Params& p) {
    const auto x = l.add(r, g);
    const auto t = l.f(p.t), neg_t = l.f(-p.t);
    const auto pos = l.ge(x, t), neg = l.le(x, neg_t);
    // t, -t or +0 (at most one of pos and neg holds); x - (+0) leaves every x as it is, -0
    // included, where adding +0 would not.
    r = l.sub(x, l.add(l.ifThen(pos, t), l.ifThen(neg, neg_t)));
    return l.orU(l.ifThen(pos, l.u(kPos)), l.ifThen(neg, l.u(kNeg)));
  }

  template <class L>
  GC_HD static typename L::F decode(const L& l, typename L::U code, const Params& p) {
    return compll::ternaryValue(l, code, p.t);
  }
};

}  // namespace gcagent::compress::codecs

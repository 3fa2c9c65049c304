// terngrad: stochastic ternary levels {-s, 0, +s}, one scale s per slice (Wen et al. 2017,
// "TernGrad"). x (g, or g + r with error_feedback) is clipped to [-2.5 sigma, 2.5 sigma], sigma
// = sqrt(mean(x^2)) (the deviation about zero: the paper takes gradients as zero-mean, and a
// slice of one sign is not clipped towards zero), and s = max |clipped x|; an element is sent
// as sign(x) * s with probability |clipped x| / s, from counter-based draws keyed by (seed,
// key, slice, step, element): E[decoded] = clipped x. Codes in MXNet 2-bit's layout: 3 is +s,
// 2 is -s, 0 is 0, and 1 is never written.
#pragma once

#include <cmath>

#include "compress/compll/definition.h"
#include "compress/compll/ops.h"

namespace gcagent::compress::codecs {

struct Terngrad {
  static constexpr std::string_view kName = "terngrad";
  static constexpr std::string_view kSummary = "stochastic ternary with a per-slice scaler";
  using Codes = compll::Codes<2>;
  static constexpr bool kPaddingChecked = true;
  static constexpr uint32_t kNeverWritten = 1;
  static constexpr bool kFeedbackByDefault = false;

  struct Params {
    bool clip;
    uint64_t seed;
  };
  static Params read(ParamReader& reader) {
    return {reader.boolean("clip", true,
                           "clip to 2.5 times the slice's root mean square before quantizing, as TernGrad does"),
            reader.seed("seed", 0, "seed of the stochastic rounding")};
  }
  static uint64_t stream(const Params& p, uint64_t key, uint32_t slice, uint64_t step) {
    return rng::streamSeed(p.seed, key, slice, step);
  }

  // The sum of squares also catches a NaN, which no maximum sees.
  static unsigned stats(const Params&) { return compll::kSumSquares | compll::kMaxAbs; }
  // s = max |clip(x)| = min(bound, max |x|); clipping at s is then clipping at the bound.
  GC_HD static float scale(const compll::SliceStats& st, size_t n, const Params& p) {
    const float bound = p.clip && n > 0 ? static_cast<float>(2.5 * sqrt(st.sum_squares / static_cast<double>(n)))
                                        : floatOf(0x7f800000u);
    return st.max_abs < bound ? st.max_abs : bound;
  }

  template <class L>
  GC_HD static typename L::U encode(const L& l, typename L::F g, typename L::F& r, const Params& p, float s,
                                    typename L::F u) {
    const auto x = l.add(g, r);
    const auto vs = l.f(s), neg_s = l.f(-s);
    const auto xc = l.select(l.gt(x, vs), vs, l.select(l.lt(x, neg_s), neg_s, x));
    // s is 0 only when every xc is: dividing by 1 then keeps 0/0 out and still gives 0.
    const auto keep = l.lt(u, l.div(l.abs(xc), l.select(l.gt(vs, l.f(0.0f)), vs, l.f(1.0f))));
    const auto code = l.ifThen(keep, l.select(l.lt(xc, l.f(0.0f)), l.u(2), l.u(3)));
    r = l.sub(x, decode(l, code, p, s));
    return code;
  }

  template <class L>
  GC_HD static typename L::F decode(const L& l, typename L::U code, const Params&, float s) {
    return compll::ternaryValue(l, code, s);
  }
};

}  // namespace gcagent::compress::codecs

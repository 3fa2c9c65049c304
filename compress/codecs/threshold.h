// threshold: GradDrop (Aji & Heafield 2017) with error feedback. r += g; the `drop` fraction R
// of the smallest |r| stays in r, the rest goes out as (index, value) pairs, indices ascending,
// and is zeroed in r. The cut is the (1 - R) quantile of |r| over a sample of max(256,
// ceil(sample * n)) elements (compll/selection.h); every element at or above it goes, but never
// more than k = max(1, ceil((1 - R) n)): when more pass, the k largest go. When the sample puts
// the cut too high, fewer than k go; topping up from the largest of the rest would make this
// exactly topk, so the shortfall stays in r. count is about (1 - R) n on average, exactly k for
// slices read whole: the size varies, 4 + 8 count bytes, at most 4 + 8k.
#pragma once

#include "compress/compll/definition.h"

namespace gcagent::compress::codecs {

struct Threshold {
  static constexpr std::string_view kName = "threshold";
  static constexpr std::string_view kSummary = "drop the smallest fraction of magnitudes into the residual";

  struct Params {
    compll::Selection selection;
    uint64_t seed;
  };
  static Params read(ParamReader& reader) {
    Params p{};
    p.selection.kept = 1 - reader.real("drop", 0.99, Range{0, 1, false, true},
        "fraction of the smallest magnitudes kept back in the residual");
    p.selection.sample = reader.real("sample", 0.001, Range::openClosed(0, 1),
        "fraction of the elements sampled to estimate the cut-off");
    p.seed = reader.seed("seed", 0, "seed of the cut-off sampling");
    return p;
  }

  static compll::Selection selection(const Params& p) { return p.selection; }
  static uint64_t stream(const Params& p, uint64_t key, uint32_t slice, uint64_t step) {
    return rng::streamSeed(p.seed, key, slice, step);
  }

  template <class L>
  GC_HD static void update(const L& l, typename L::F g, typename L::F& r, const Params&) {
    r = l.add(r, g);
  }
};

}  // namespace gcagent::compress::codecs

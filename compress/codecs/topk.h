// topk: exact top-k by magnitude with error feedback (DGC, GRACE). x = r + g; the k largest |x|
// go out as (index, value) pairs, indices ascending, equal magnitudes to the lower index; r
// keeps x with the sent entries zeroed. k = max(1, ceil(ratio * n)) (0 for an empty slice), so
// the encoding is always exactly 4 + 8k bytes. A sampled cut only narrows the candidates
// (compll/selection.h); the chosen set does not depend on its stream.
#pragma once

#include "compress/compll/definition.h"

namespace gcagent::compress::codecs {

struct Topk {
  static constexpr std::string_view kName = "topk";
  static constexpr std::string_view kSummary = "exact top-k by magnitude with residual";

  struct Params {
    compll::Selection selection;
  };
  static Params read(ParamReader& reader) {
    return {{reader.real("ratio", 0.01, Range::openClosed(0, 1), "fraction of the elements sent, the largest magnitudes"),
             0.0, 0, false}};
  }

  static compll::Selection selection(const Params& p) { return p.selection; }
  static uint64_t stream(const Params&, uint64_t key, uint32_t slice, uint64_t step) {
    return rng::streamSeed(0, key, slice, step);
  }

  template <class L>
  GC_HD static void update(const L& l, typename L::F g, typename L::F& r, const Params&) {
    r = l.add(r, g);
  }
};

}  // namespace gcagent::compress::codecs

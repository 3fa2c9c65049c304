// dgc: Deep Gradient Compression (Lin et al. 2018). Momentum correction: u = m u + g; v += u,
// v the residual the largest elements are sent from (compll/selection.h: a sampled cut,
// lowered 0.8x while too few reach it, the exact k when too many do, DGC's sparsity
// warm-up). Momentum factor masking: a sent element restarts in u as in v, or its stale
// momentum would keep pushing it after the update. With m = 0, u is just g and sent + v is
// exactly what was given. Defaults (README's DDP example, plain SGD at lr 0.5 on 2 nodes x 2
// trainers for 110 steps, ends within 2 points of uncompressed with them:
// tests/clients/python/test_dgc_defaults.py): ratio 0.001, DGC's 99.9% sparsity; momentum
// 0, since the optimizer keeps its own (0.9 silently made plain SGD momentum SGD, 10x the
// step); warm-up 50 encodes of a slice (the codec sees no epochs), 4.5 of the example's 10.
#pragma once

#include "compress/compll/definition.h"

namespace gcagent::compress::codecs {

struct Dgc {
  static constexpr std::string_view kName = "dgc";
  static constexpr std::string_view kSummary = "deep gradient compression: momentum correction, sampled threshold";
  static constexpr bool kKeepsMoment = true;  // u

  struct Params {
    compll::Selection selection;
    float momentum;
    uint64_t seed;
  };
  static Params read(ParamReader& reader) {
    Params p{};
    p.selection.lowers = true;
    p.selection.kept = reader.real("ratio", 0.001, Range::openClosed(0, 1),
        "fraction of the elements sent (after momentum correction), once the warm-up is over");
    p.momentum = static_cast<float>(reader.real("momentum", 0, Range{0, 1, false, true},
        "DGC's momentum correction; set the optimizer's momentum to 0 when it is above 0"));
    p.selection.sample = reader.real("sample", 0.01, Range::openClosed(0, 1),
        "fraction of the elements sampled to estimate the threshold");
    p.seed = reader.seed("seed", 0, "seed of the threshold sampling");
    p.selection.warmup = static_cast<uint64_t>(reader.integer("warmup_steps", 50, Range::closed(0, 1000000),
        "sparsity warm-up: over this many encodes of a slice the fraction sent falls geometrically "
        "from 25% to `ratio` (0: no warm-up)"));
    return p;
  }

  static compll::Selection selection(const Params& p) { return p.selection; }
  static uint64_t stream(const Params& p, uint64_t key, uint32_t slice, uint64_t step) {
    return rng::streamSeed(p.seed, key, slice, step);
  }

  template <class L>
  GC_HD static void update(const L& l, typename L::F g, typename L::F& v, typename L::F& u, const Params& p) {
    u = l.add(l.mul(l.f(p.momentum), u), g);
    v = l.add(v, u);
  }
};

}  // namespace gcagent::compress::codecs

// Deep Gradient Compression (Lin et al. 2018): momentum correction, a sampled threshold,
// momentum factor masking. Per step, with u the momentum and v the accumulated velocity:
//   u = m u + g; v += u;
//   the cut: the `ratio` quantile of |v| over a sample of max(256, ceil(sample * n)) elements
//     drawn with replacement by a generator seeded from (seed, key, slice, step) (slices no
//     larger than the sample are read whole, making the cut the exact k-th largest);
//   while fewer than 0.8k reach the cut, lower it by 0.8x, at most 10 times;
//   if more than 1.3k reach it, send the exact k largest of those (equal magnitudes to the
//     lower index), else all of them;
//   send (index, v) pairs in the shared sparse format (compress/sparse/sparse_format.h),
//     indices ascending, and zero u and v at the sent indices.
// k = max(1, ceil(kept * n)), where kept is `ratio` after the sparsity warm-up: over a
// slice's first `warmup_steps` encodes, counted in its state, kept falls geometrically from
// 25% to `ratio` (dgc::keptFraction in dgc_math.h; the GPU codec plans the same counts on the
// device). Every sent |v| >= every kept |v|, and 1 <= count <= 1.3k (0 for an empty slice),
// so the size varies up to 4 + 8 floor(1.3k) bytes (k of the warm-up's 25% while it has one).
// v is the error-feedback residual; with m = 0, u is just g and sent + v is exactly what was
// given. Defaults and why: dgc.h.
#include "compress/dgc/dgc.h"

#include <algorithm>
#include <vector>

#include "compress/cpu/checks.h"
#include "compress/dgc/dgc_math.h"
#include "compress/params.h"
#include "compress/without_feedback.h"
#include "compress/sparse/select.h"

namespace gcagent::compress {
namespace {

constexpr float kLowerBy = 0.8f;
constexpr int kMaxLowerings = 10;

// The most pairs sent for a target of k: floor(1.3k).
size_t mostPairs(size_t k) { return k + 3 * k / 10; }

class DgcCodec final : public Codec {
 public:
  DgcCodec(double ratio, float momentum, double sample, uint64_t seed, uint64_t warmup, const CodecEnv& env)
      : ratio_(ratio), momentum_(momentum), sample_(sample), seed_(seed), warmup_(warmup),
        warmup_factor_(dgc::warmupFactor(ratio, warmup)), env_(env) {}

  std::string_view name() const override { return "dgc"; }
  // v (the residual), then u, then (with a warm-up) the count of encodes so far, as a float
  // (exact: it stops at warmup_steps <= 10^6 < 2^24).
  size_t stateElements(size_t n) const override { return 2 * n + (warmup_ != 0 ? 1 : 0); }
  std::span<const float> residual(std::span<const float> state, size_t n) const override {
    return state.size() >= stateElements(n) ? state.first(n) : std::span<const float>{};
  }
  size_t maxEncodedBytes(size_t n) const override {
    return sparse::bytesFor(std::min(n, mostPairs(sparse::countFor(dgc::mostKept(ratio_, warmup_), n))));
  }
  size_t steadyEncodedBytes(size_t n) const override {
    return sparse::bytesFor(std::min(n, mostPairs(sparse::countFor(dgc::mostKept(ratio_, 0), n))));
  }
  bool isFixedSize() const override { return false; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id) const override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(
        checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), maxEncodedBytes(n)));
    const std::span<float> v = state.first(n);
    const std::span<float> u = state.subspan(n, n);
    if (n == 0) return sparse::sendAndClear(v, {}, out);
    double kept = ratio_;
    if (warmup_ != 0) {
      float& encodes = state[2 * n];
      const auto t = static_cast<uint64_t>(encodes);
      kept = dgc::keptFraction(ratio_, warmup_factor_, t, warmup_);
      if (t < warmup_) encodes = static_cast<float>(t + 1);
    }
    const size_t k = sparse::countFor(kept, n);
    const size_t samples = sparse::sampleCount(sample_, n);
    const uint64_t stream = rng::streamSeed(seed_, id.key, id.slice, id.step);
    uint32_t* idx = sparse::indexScratch(n);
    size_t count = 0;
    if (samples < n) {
      // The cut comes from v as the momentum step is about to leave it, computed at the
      // sampled elements alone, so the step and the collect share one pass over the state.
      const float* g = in.data();
      const float m = momentum_;
      const uint32_t cut = sparse::estimateThresholdOf(n, kept, samples, stream, [&](size_t i) {
        float ui = u[i], vi = v[i];
        dgc::momentumStep(g[i], ui, vi, m);
        return vi;
      });
      const auto pass = sparse::kernels().momentum_collect;
      count = sparse::collectChunks(env_, n, idx, [&](size_t begin, size_t end, uint32_t* into) {
        return pass(g, u.data(), v.data(), begin, end, m, cut, into);
      });
      count = sparse::relaxCollected(v, cut, count, (4 * k + 4) / 5, kLowerBy, kMaxLowerings, idx);
    } else {
      accumulateVelocity(in, u, v);
      const uint32_t cut = sparse::estimateThreshold(v, kept, samples, stream);
      count = sparse::collectAtLeast(v, cut, idx);
      count = sparse::relaxCollected(v, cut, count, (4 * k + 4) / 5, kLowerBy, kMaxLowerings, idx);
    }
    if (count > mostPairs(k)) count = sparse::keepLargest(v, idx, count, k);
    // Momentum factor masking: a sent coordinate restarts, or its stale momentum would keep
    // pushing it after the update.
    for (size_t j = 0; j < count; ++j) u[idx[j]] = 0.0f;
    return sparse::sendAndClear(v, {idx, count}, out);
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    GC_RETURN_IF_ERROR(
        sparse::checkAtMost(name(), acc.size(), in.size(), maxEncodedBytes(acc.size())));
    return sparse::decodeAdd(in, acc, name());
  }

  Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                const SliceId&) const override {
    GC_RETURN_IF_ERROR(
        sparse::checkAtMost(name(), out.size(), in.size(), maxEncodedBytes(out.size())));
    return sparse::decode(in, out, scale, name());
  }

 private:
  void accumulateVelocity(std::span<const float> in, std::span<float> u, std::span<float> v) const {
    const float* g = in.data();
    float* pu = u.data();
    float* pv = v.data();
    const float m = momentum_;
    forChunks(env_, in.size(), 16, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) dgc::momentumStep(g[i], pu[i], pv[i], m);
    });
  }

  double ratio_;
  float momentum_;
  double sample_;
  uint64_t seed_;
  uint64_t warmup_;
  double warmup_factor_;
  CodecEnv env_;
};

}  // namespace

// ratio: the target density k/n, in (0, 1], default 0.001.
// momentum: m, in [0, 1), default 0.9.
// sample: the fraction of elements the threshold is estimated from, in (0, 1], default 0.01
//   (at least 256 elements).
// seed: the sample generator's seed, default 0.
// warmup_steps: the sparsity warm-up, in encodes of a slice, in [0, 10^6], default
//   kDgcDefaultWarmupSteps: the density starts at 25% and falls geometrically to `ratio`
//   (dgc::keptFraction); 0: `ratio` from the first step.
// error_feedback: keep the state between steps, default true; false sends the top of each
//   step's gradient alone (no momentum correction, nothing carried over, no warm-up).
Result<std::unique_ptr<Codec>> makeDgcCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("dgc", params);
  const double ratio = reader.real("ratio", kDgcDefaultRatio, Range::openClosed(0, 1),
      "fraction of the elements sent (after momentum correction), once the warm-up is over");
  const double momentum = reader.real("momentum", kDgcDefaultMomentum, Range{0, 1, false, true},
      "DGC's momentum correction; set the optimizer's momentum to 0 when it is above 0");
  const double sample = reader.real("sample", 0.01, Range::openClosed(0, 1),
      "fraction of the elements sampled to estimate the threshold");
  const uint64_t seed = reader.seed("seed", 0,
      "seed of the threshold sampling");
  const int64_t warmup = reader.integer("warmup_steps", kDgcDefaultWarmupSteps, Range::closed(0, 1000000),
      "sparsity warm-up: over this many encodes of a slice the fraction sent falls geometrically "
      "from 25% to `ratio` (0: no warm-up)");
  const bool error_feedback = reader.boolean("error_feedback", true,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  // Without feedback there is no state to count the encodes in: no warm-up either.
  return applyErrorFeedback(error_feedback,
                            std::unique_ptr<Codec>(new DgcCodec(ratio, static_cast<float>(momentum), sample, seed,
                                                                error_feedback ? static_cast<uint64_t>(warmup) : 0,
                                                                env)));
}

}  // namespace gcagent::compress

// GradDrop (Aji & Heafield 2017) with error feedback. r += g; the `drop` fraction R of the
// smallest |r| stays in r, the rest goes out as (index, value) pairs in the shared sparse
// format (compress/sparse/sparse_format.h), indices ascending, and is zeroed in r.
//
// The cut is the (1-R) quantile of |r| over a sample of max(256, ceil(sample * n)) elements
// drawn with replacement by a generator seeded from (seed, key, slice, step); slices no
// larger than the sample are read whole. Every element at or above the cut goes, but never
// more than k = max(1, ceil((1-R) n)): when more pass, the k largest go (equal magnitudes to
// the lower index). When the sample puts the cut too high, fewer than k go; topping up from
// the largest of the rest would make this exactly topk, so the shortfall stays in r.
// Guarantees: every sent |r| >= every kept |r|; 1 <= count <= k (0 for an empty slice);
// count is about (1-R) n on average, and exactly k for slices read whole. The size is
// therefore variable, 4 + 8 * count bytes, at most 4 + 8k.
#include "compress/threshold/threshold.h"

#include <vector>

#include "compress/cpu/checks.h"
#include "compress/params.h"
#include "compress/without_feedback.h"
#include "compress/sparse/select.h"

namespace gcagent::compress {
namespace {

class ThresholdCodec final : public Codec {
 public:
  ThresholdCodec(double drop, double sample, uint64_t seed, const CodecEnv& env)
      : keep_(1 - drop), sample_(sample), seed_(seed), env_(env) {}

  std::string_view name() const override { return "threshold"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override {
    return sparse::bytesFor(sparse::countFor(keep_, n));
  }
  bool isFixedSize() const override { return false; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id) const override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(
        checkEncodeSpans(name(), n, state.size(), n, out.size(), maxEncodedBytes(n)));
    const std::span<float> r = state.first(n);
    if (n == 0) return sparse::sendAndClear(r, {}, out);
    const size_t samples = sparse::sampleCount(sample_, n);
    const uint64_t stream = rng::streamSeed(seed_, id.key, id.slice, id.step);
    uint32_t* idx = sparse::indexScratch(n);
    size_t count = 0;
    if (samples < n) {
      // The cut comes from r + g at the sampled elements, before r is updated, so the
      // accumulation and the collect share one pass.
      const float* g = in.data();
      const uint32_t cut = sparse::estimateThresholdOf(
          n, keep_, samples, stream, [&](size_t i) { return r[i] + g[i]; });
      const auto pass = sparse::kernels().accumulate_collect;
      count = sparse::collectChunks(env_, n, idx, [&](size_t begin, size_t end, uint32_t* into) {
        return pass(g, r.data(), begin, end, cut, into);
      });
    } else {
      sparse::accumulate(env_, in, r);
      count = sparse::collectAtLeast(r, sparse::estimateThreshold(r, keep_, samples, stream), idx);
    }
    count = sparse::keepLargest(r, idx, count, sparse::countFor(keep_, n));
    return sparse::sendAndClear(r, {idx, count}, out);
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
  double keep_;  // 1 - drop: the fraction sent
  double sample_;
  uint64_t seed_;
  CodecEnv env_;
};

}  // namespace

// drop: the fraction R of smallest magnitudes kept back, in [0, 1), default 0.99.
// error_feedback: keep the residual, default true; false drops the small entries for good.
// sample: the fraction of elements the cut is estimated from, in (0, 1], default 0.001
//   (at least 256 elements).
// seed: the sample generator's seed, default 0.
Result<std::unique_ptr<Codec>> makeThresholdCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("threshold", params);
  const double drop = reader.real("drop", 0.99, Range{0, 1, false, true},
      "fraction of the smallest magnitudes kept back in the residual");
  const double sample = reader.real("sample", 0.001, Range::openClosed(0, 1),
      "fraction of the elements sampled to estimate the cut-off");
  const uint64_t seed = reader.seed("seed", 0,
      "seed of the cut-off sampling");
  const bool error_feedback = reader.boolean("error_feedback", true,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return applyErrorFeedback(error_feedback,
                            std::unique_ptr<Codec>(new ThresholdCodec(drop, sample, seed, env)));
}

}  // namespace gcagent::compress

// Exact top-k by magnitude with error feedback (DGC, GRACE). x = r + g; the k largest |x|
// go out as (index, value) pairs in the shared sparse format (compress/sparse/sparse_format.h),
// indices ascending; equal magnitudes go to the lower index. r keeps x with the sent entries
// zeroed. k = max(1, ceil(ratio * n)) (0 for an empty slice), so the encoding is always
// exactly 4 + 8k bytes.
#include "compress/topk/topk.h"

#include "compress/cpu/checks.h"
#include "compress/params.h"
#include "compress/without_feedback.h"
#include "compress/sparse/select.h"

namespace gcagent::compress {
namespace {

class TopkCodec final : public Codec {
 public:
  TopkCodec(double ratio, const CodecEnv& env) : ratio_(ratio), env_(env) {}

  std::string_view name() const override { return "topk"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override {
    return sparse::bytesFor(sparse::countFor(ratio_, n));
  }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id) const override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(
        checkEncodeSpans(name(), n, state.size(), n, out.size(), maxEncodedBytes(n)));
    const std::span<float> r = state.first(n);
    if (n == 0) return sparse::sendAndClear(r, {}, out);
    const size_t k = sparse::countFor(ratio_, n);
    uint32_t* idx = sparse::indexScratch(n);
    size_t count = 0;
    const size_t samples = sparse::prefilterSamples(n);
    if (const size_t rank = sparse::prefilterRank(n, k, samples); rank != 0) {
      // The candidates' cut comes from r + g at the sampled elements, before r is updated,
      // so the accumulation and the collect share one pass. The stream only steers this
      // prefilter; the chosen set does not depend on it.
      const float* g = in.data();
      const uint32_t cut =
          sparse::sampledKeyOf(n, samples, rank, rng::streamSeed(0, id.key, id.slice, id.step),
                               [&](size_t i) { return r[i] + g[i]; });
      const auto pass = sparse::kernels().accumulate_collect;
      count = sparse::collectChunks(env_, n, idx, [&](size_t begin, size_t end, uint32_t* into) {
        return pass(g, r.data(), begin, end, cut, into);
      });
    } else {
      sparse::accumulate(env_, in, r);
    }
    if (count < k) count = sparse::collectAtLeast(r, 0, idx);
    count = sparse::keepLargest(r, idx, count, k);
    return sparse::sendAndClear(r, {idx, count}, out);
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), maxEncodedBytes(n)));
    return sparse::decodeAdd(in, acc, name());
  }

  Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                const SliceId&) const override {
    GC_RETURN_IF_ERROR(
        sparse::checkAtMost(name(), out.size(), in.size(), maxEncodedBytes(out.size())));
    return sparse::decode(in, out, scale, name());
  }

 private:
  double ratio_;
  CodecEnv env_;
};

}  // namespace

// ratio: the fraction of elements sent, in (0, 1], default 0.01.
// error_feedback: keep the residual, default true.
Result<std::unique_ptr<Codec>> makeTopkCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("topk", params);
  const double ratio = reader.real("ratio", 0.01, Range::openClosed(0, 1),
      "fraction of the elements sent, the largest magnitudes");
  const bool error_feedback = reader.boolean("error_feedback", true,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return applyErrorFeedback(error_feedback, std::unique_ptr<Codec>(new TopkCodec(ratio, env)));
}

}  // namespace gcagent::compress

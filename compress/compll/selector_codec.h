// A selecting definition as a Codec: the sizes, the state, the sparsity warm-up and the
// selection of selection.h around the definition's CPU pass, with the operators of
// compress/sparse/select.h (sampled quantile, collection split over the codec pool, lowering,
// exact top-k, writing and clearing what was sent), and the (index, value) decoder.
//
// State: v (the residual), then the moments when the definition keeps them, then (with a
// warm-up) the count of encodes so far, as a float (exact: it stops at warmup <= 10^6 <
// 2^24). Every sent |v| >= every kept |v|, and 1 <= count <= k (floor(1.3k) when the cut is
// lowered; 0 for an empty slice), so the size varies up to 4 + 8 count bytes (k of the
// warm-up's 25% while it lasts), or is exactly 4 + 8k for an exact selection.
// Selection runs on the caller's thread and depends only on the values and the stream, so
// the bytes never depend on how the pass was split.
#pragma once

#include <memory>

#include "compress/codec.h"
#include "compress/compll/definition.h"
#include "compress/compll/kernels.h"
#include "compress/cpu/checks.h"
#include "compress/params.h"
#include "compress/sparse/select.h"
#include "compress/without_feedback.h"

namespace gcagent::compress::compll {

template <class Def>
class SelectorCodec final : public Codec {
  static constexpr size_t kArrays = kKeepsMoment<Def> ? 2 : 1;

 public:
  SelectorCodec(typename Def::Params p, bool warming, const CodecEnv& env)
      : p_(p), s_(Def::selection(p)), warming_(warming && s_.warmup != 0),
        q_(warmupFactor(s_.kept, warming_ ? s_.warmup : 0)), env_(env) {}

  std::string_view name() const override { return Def::kName; }
  size_t stateElements(size_t n) const override { return kArrays * n + (warming_ ? 1 : 0); }
  std::span<const float> residual(std::span<const float> state, size_t n) const override {
    return state.size() >= stateElements(n) ? state.first(n) : std::span<const float>{};
  }
  size_t maxEncodedBytes(size_t n) const override { return sparse::bytesFor(mostSent(s_, n, warming_)); }
  size_t steadyEncodedBytes(size_t n) const override { return sparse::bytesFor(mostSent(s_, n, false)); }
  bool isFixedSize() const override { return exact(s_); }  // exactly k pairs

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId& id) const override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(sparse::checkSliceLength(name(), n));
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), stateElements(n), out.size(), maxEncodedBytes(n)));
    const std::span<float> v = state.first(n);
    float* m = kKeepsMoment<Def> ? state.data() + n : nullptr;
    if (n == 0) return sparse::sendAndClear(v, {}, out);
    double kept = s_.kept;
    if (warming_) {
      float& encodes = state[kArrays * n];
      const auto t = static_cast<uint64_t>(encodes);
      kept = keptFraction(s_.kept, q_, t, s_.warmup);
      if (t < s_.warmup) encodes = static_cast<float>(t + 1);
    }
    const size_t k = sparse::countFor(kept, n);
    const uint64_t stream = Def::stream(p_, id.key, id.slice, id.step);
    const auto pass = kernelsFor<Def>(cpu::activeIsa()).update_collect;
    const float* g = in.data();
    uint32_t* idx = sparse::indexScratch(n);
    // The sample: the cut's, or for an exact selection the prefilter's, which only narrows
    // the candidates (rank 0: no sample, the slice is read whole).
    const size_t samples = exact(s_) ? sparse::prefilterSamples(n) : sparse::sampleCount(s_.sample, n);
    const size_t rank = exact(s_) ? sparse::prefilterRank(n, k, samples) : samples < n ? sparse::countFor(kept, samples) : 0;
    uint32_t cut = kCollectNone;
    if (rank != 0) {
      // The cut comes from v as the update is about to leave it, computed at the sampled
      // elements alone, so the update and the collection share one pass over the state.
      cut = sparse::sampledKeyOf(n, samples, rank, stream, [&](size_t i) {
        float vi = v[i], mi = kKeepsMoment<Def> ? m[i] : 0.0f;
        update(g[i], vi, mi);
        return vi;
      }, [&](size_t i) {
        __builtin_prefetch(g + i);
        __builtin_prefetch(v.data() + i);
        if constexpr (kKeepsMoment<Def>) __builtin_prefetch(m + i);
      }, env_);
    }
    size_t count = sparse::collectChunks(env_, n, idx, [&](size_t begin, size_t end, uint32_t* into) {
      return pass(g, v.data(), m, begin, end, p_, cut, into);
    });
    if (exact(s_)) {
      if (count < k) count = sparse::collectAtLeast(v, 0, idx);
      count = sparse::keepLargest(v, idx, count, k);
    } else {
      if (samples >= n) {
        cut = sparse::estimateThreshold(v, kept, samples, stream);
        count = sparse::collectAtLeast(v, cut, idx);
      }
      if (s_.lowers) count = sparse::relaxCollected(v, cut, count, enoughFor(k), kLowerBy, kMaxLowerings, idx);
      if (count > (s_.lowers ? mostPairs(k) : k)) count = sparse::keepLargest(v, idx, count, k);
    }
    if constexpr (kKeepsMoment<Def>) {
      for (size_t j = 0; j < count; ++j) m[idx[j]] = 0.0f;
    }
    return sparse::sendAndClear(v, {idx, count}, out);
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&) const override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(exact(s_) ? checkEncodedSize(name(), n, in.size(), maxEncodedBytes(n))
                                 : sparse::checkAtMost(name(), n, in.size(), maxEncodedBytes(n)));
    return sparse::decodeAdd(in, acc, name());
  }

  Status decode(std::span<const std::byte> in, std::span<float> out, float scale, const SliceId&) const override {
    GC_RETURN_IF_ERROR(sparse::checkAtMost(name(), out.size(), in.size(), maxEncodedBytes(out.size())));
    return sparse::decode(in, out, scale, name());
  }

 private:
  void update(float g, float& v, float& m) const {
    const ScalarLanes l;
    if constexpr (kKeepsMoment<Def>) {
      Def::update(l, g, v, m, p_);
    } else {
      (void)m;
      Def::update(l, g, v, p_);
    }
  }

  typename Def::Params p_;
  Selection s_;
  bool warming_;
  double q_;
  CodecEnv env_;
};

// The registry's factory for a selecting definition: its parameters, then error_feedback.
// Without feedback each encode starts from a zeroed state (no moments, no warm-up: there is
// no state to count the encodes in) and sends the top of that step's gradient alone.
template <class Def>
Result<std::unique_ptr<Codec>> makeSelector(const Params& params, const CodecEnv& env) {
  ParamReader reader(Def::kName, params);
  const typename Def::Params p = Def::read(reader);
  const bool error_feedback = reader.boolean("error_feedback", true, kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return applyErrorFeedback(error_feedback, std::unique_ptr<Codec>(new SelectorCodec<Def>(p, error_feedback, env)));
}

}  // namespace gcagent::compress::compll

// A quantizer definition as a Codec: size checks, the slice statistics and the scale of a
// scaled definition, the split over the codec pool, the padding, the checks of what arrives,
// and the error_feedback parameter around the definition's CPU loops.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/str_cat.h"
#include "compress/bytes.h"
#include "compress/codec.h"
#include "compress/compll/definition.h"
#include "compress/compll/quantizer_kernels.h"
#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"
#include "compress/params.h"
#include "compress/without_feedback.h"

namespace gcagent::compress::compll {

// True when no code bit past element n is set (codes of C::bytes(n) bytes).
template <class C>
bool paddingIsClear(const uint8_t* codes, size_t n) {
  const size_t last = n / C::kPerByte;  // the byte holding element n, when n is not on a byte edge
  if (n % C::kPerByte != 0 && (codes[last] & ((1u << C::shift(n - 1)) - 1u)) != 0) return false;
  for (size_t b = C::usedBytes(n); b < C::bytes(n); ++b)
    if (codes[b] != 0) return false;
  return true;
}

template <class Def>
class QuantizerCodec final : public Codec {
  using C = typename Def::Codes;
  static constexpr size_t kHeader = kHeaderBytes<Def>;

 public:
  QuantizerCodec(typename Def::Params p, const CodecEnv& env) : p_(p), env_(env) {}

  std::string_view name() const override { return Def::kName; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return kHeader + C::bytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId&) const override {
    const size_t n = in.size();
    const size_t bytes = maxEncodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), bytes));
    const float* g = in.data();
    float* r = state.data();
    float scale = 1.0f;
    if constexpr (Scaled<Def>) {
      GC_ASSIGN_OR_RETURN(scale, scaleOf(g, r, n));
      storeLe(out.data(), scale);
    }
    auto* codes = reinterpret_cast<uint8_t*>(out.data() + kHeader);
    const auto encode = quantizerKernels<Def>(cpu::activeIsa()).encode;
    forChunks(env_, n, C::kPerWord, [&](size_t begin, size_t end) { encode(g, r, codes, begin, end, p_, scale); });
    // The tail of the last word carries no elements; keep it zero.
    const size_t code_bytes = C::bytes(n);
    if (code_bytes > C::usedBytes(n)) std::memset(codes + C::usedBytes(n), 0, code_bytes - C::usedBytes(n));
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&) const override {
    const size_t n = acc.size();
    GC_ASSIGN_OR_RETURN(const float scale, arrived(in, n));
    const auto* codes = reinterpret_cast<const uint8_t*>(in.data() + kHeader);
    float* dst = acc.data();
    const auto decode_add = quantizerKernels<Def>(cpu::activeIsa()).decode_add;
    forChunks(env_, n, C::kPerWord, [&](size_t begin, size_t end) { decode_add(codes, dst, begin, end, p_, scale); });
    return {};
  }

  Status decode(std::span<const std::byte> in, std::span<float> out, float factor,
                const SliceId&) const override {
    const size_t n = out.size();
    GC_ASSIGN_OR_RETURN(const float scale, arrived(in, n));
    const auto* codes = reinterpret_cast<const uint8_t*>(in.data() + kHeader);
    float* dst = out.data();
    const auto decode = quantizerKernels<Def>(cpu::activeIsa()).decode;
    forChunks(env_, n, C::kPerWord,
              [&](size_t begin, size_t end) { decode(codes, dst, begin, end, p_, scale, factor); });
    return {};
  }

 private:
  // The scale of x = g + r, or an error when x holds an infinity or a NaN.
  Result<float> scaleOf(const float* g, const float* r, size_t n) const {
    const unsigned which = Def::stats(p_);
    SliceStats stats;
    if (which != 0 && n != 0) {
      // Per thread: encode is const and runs on several codec threads at once.
      thread_local std::vector<SliceStats> blocks;
      const size_t count = (n + kStatsBlock - 1) / kStatsBlock;
      if (blocks.size() < count) blocks.resize(count);
      SliceStats* out = blocks.data();
      const BlockStatsFn block_stats = blockStatsKernel(cpu::activeIsa(), which);
      forChunks(env_, n, kStatsBlock, [&](size_t begin, size_t end) { block_stats(g, r, begin, end, out); });
      stats = combineBlocks(out, count);
      // Sums of fp32 magnitudes and squares cannot overflow a double: non-finite means x was.
      if (!std::isfinite(stats.sum_abs) || !std::isfinite(stats.sum_squares))
        return Status::invalidArgument(strCat(name(), ": gradient plus residual holds a non-finite value"));
    }
    return Def::scale(stats, n, p_);
  }

  // The scale of an encoding that arrived for n elements, once its size, scale and padding
  // are what an encoder writes.
  Result<float> arrived(std::span<const std::byte> in, size_t n) const {
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), maxEncodedBytes(n)));
    float scale = 1.0f;
    if constexpr (Scaled<Def>) {
      scale = loadLe<float>(in.data());
      if (!std::isfinite(scale) || scale < 0.0f)
        return Status::dataLoss(strCat(name(), ": scale is ", scale, ", expected a finite value >= 0"));
    }
    if constexpr (kPaddingChecked<Def>) {
      if (!paddingIsClear<C>(reinterpret_cast<const uint8_t*>(in.data() + kHeader), n))
        return Status::dataLoss(strCat(name(), ": padding bits past element ", n, " are set"));
    }
    return scale;
  }

  typename Def::Params p_;
  CodecEnv env_;
};

// The registry's factory for a quantizer definition: its parameters, then error_feedback.
template <class Def>
Result<std::unique_ptr<Codec>> makeQuantizer(const Params& params, const CodecEnv& env) {
  ParamReader reader(Def::kName, params);
  const typename Def::Params p = Def::read(reader);
  const bool error_feedback = reader.boolean("error_feedback", true, kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return applyErrorFeedback(error_feedback, std::unique_ptr<Codec>(new QuantizerCodec<Def>(p, env)));
}

}  // namespace gcagent::compress::compll

// A quantizer definition as a Codec: size checks, the split over the codec pool, the
// padding, and the error_feedback parameter around the definition's CPU loops.
#pragma once

#include <cstring>
#include <memory>

#include "compress/codec.h"
#include "compress/compll/quantizer_kernels.h"
#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"
#include "compress/params.h"
#include "compress/without_feedback.h"

namespace gcagent::compress::compll {

template <class Def>
class QuantizerCodec final : public Codec {
  using C = typename Def::Codes;

 public:
  QuantizerCodec(typename Def::Params p, const CodecEnv& env) : p_(p), env_(env) {}

  std::string_view name() const override { return Def::kName; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return C::bytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const SliceId&) const override {
    const size_t n = in.size();
    const size_t bytes = C::bytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), bytes));
    const float* g = in.data();
    float* r = state.data();
    auto* codes = reinterpret_cast<uint8_t*>(out.data());
    const auto encode = quantizerKernels<Def>(cpu::activeIsa()).encode;
    forChunks(env_, n, C::kPerWord, [&](size_t begin, size_t end) { encode(g, r, codes, begin, end, p_); });
    // The tail of the last word carries no elements; keep it zero.
    if (bytes > C::usedBytes(n)) std::memset(codes + C::usedBytes(n), 0, bytes - C::usedBytes(n));
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const SliceId&) const override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), C::bytes(n)));
    const auto* codes = reinterpret_cast<const uint8_t*>(in.data());
    float* dst = acc.data();
    const auto decode_add = quantizerKernels<Def>(cpu::activeIsa()).decode_add;
    forChunks(env_, n, C::kPerWord, [&](size_t begin, size_t end) { decode_add(codes, dst, begin, end, p_); });
    return {};
  }

  Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                const SliceId&) const override {
    const size_t n = out.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), C::bytes(n)));
    const auto* codes = reinterpret_cast<const uint8_t*>(in.data());
    float* dst = out.data();
    const auto decode = quantizerKernels<Def>(cpu::activeIsa()).decode;
    forChunks(env_, n, C::kPerWord, [&](size_t begin, size_t end) { decode(codes, dst, begin, end, p_, scale); });
    return {};
  }

 private:
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

// A 16-bit cast codec (fp16, bf16) over the loops of one CastFormat. With
// error_feedback=true the rounding error of each element is carried to the next step.
#pragma once

#include <string_view>

#include "compress/codec.h"
#include "compress/cpu/cast_kernels.h"
#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"

namespace gcagent::compress {

class CastCodec final : public Codec {
 public:
  CastCodec(std::string_view name, CastFormat format, bool error_feedback, const CodecEnv& env)
      : name_(name), format_(format), error_feedback_(error_feedback), env_(env) {}

  std::string_view name() const override { return name_; }
  size_t stateElements(size_t n) const override { return error_feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return 2 * n; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state,
                        std::span<std::byte> out, const SliceId&) const override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(
        checkEncodeSpans(name_, n, state.size(), stateElements(n), out.size(), 2 * n));
    const float* g = in.data();
    float* r = error_feedback_ ? state.data() : nullptr;
    std::byte* dst = out.data();
    const auto encode = castKernels(format_).encode;
    forChunks(env_, n, 16, [&](size_t begin, size_t end) { encode(g, r, dst, begin, end); });
    return 2 * n;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    GC_RETURN_IF_ERROR(checkEncodedSize(name_, acc.size(), in.size(), 2 * acc.size()));
    const std::byte* src = in.data();
    float* dst = acc.data();
    const auto decode_add = castKernels(format_).decode_add;
    forChunks(env_, acc.size(), 16,
              [&](size_t begin, size_t end) { decode_add(src, dst, begin, end); });
    return {};
  }

  Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                const SliceId&) const override {
    GC_RETURN_IF_ERROR(checkEncodedSize(name_, out.size(), in.size(), 2 * out.size()));
    const std::byte* src = in.data();
    float* dst = out.data();
    const auto decode = castKernels(format_).decode;
    forChunks(env_, out.size(), 16, [&](size_t begin, size_t end) { decode(src, dst, begin, end, scale); });
    return {};
  }

 private:
  std::string_view name_;
  CastFormat format_;
  bool error_feedback_;
  CodecEnv env_;
};

}  // namespace gcagent::compress

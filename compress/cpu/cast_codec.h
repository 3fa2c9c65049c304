// A 16-bit cast codec (fp16, bf16) over a Math with fromFloat/toFloat. With
// error_feedback=true the rounding error of each element is carried to the next step.
#pragma once

#include <cstring>
#include <string_view>

#include "compress/codec.h"
#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"

namespace gcagent::compress {

template <class Math>
class CastCodec final : public Codec {
 public:
  CastCodec(std::string_view name, bool error_feedback, const CodecEnv& env)
      : name_(name), error_feedback_(error_feedback), env_(env) {}

  std::string_view name() const override { return name_; }
  size_t stateElements(size_t n) const override { return error_feedback_ ? n : 0; }
  size_t maxEncodedBytes(size_t n) const override { return 2 * n; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state,
                        std::span<std::byte> out, const SliceId&) const override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(
        checkEncodeSpans(name_, n, state.size(), stateElements(n), out.size(), 2 * n));
    const float* g = in.data();
    float* r = state.data();
    std::byte* dst = out.data();
    const bool ef = error_feedback_;
    forChunks(env_, n, 16, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        float x = ef ? g[i] + r[i] : g[i];
        uint16_t h = Math::fromFloat(x);
        if (ef) r[i] = x - Math::toFloat(h);
        std::memcpy(dst + 2 * i, &h, 2);
      }
    });
    return 2 * n;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    GC_RETURN_IF_ERROR(checkEncodedSize(name_, acc.size(), in.size(), 2 * acc.size()));
    const std::byte* src = in.data();
    float* dst = acc.data();
    forChunks(env_, acc.size(), 16, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] += Math::toFloat(h);
      }
    });
    return {};
  }

 private:
  std::string_view name_;
  bool error_feedback_;
  CodecEnv env_;
};

}  // namespace gcagent::compress

#include "compress/mx2bit/mx2bit.h"

#include <cstring>

#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"
#include "compress/mx2bit/mx2bit_kernels.h"
#include "compress/mx2bit/mx2bit_math.h"
#include "compress/params.h"
#include "compress/without_feedback.h"

namespace gcagent::compress {
namespace mx2bit {
namespace {

void encodeGeneric(const float* g, float* r, uint8_t* dst, size_t begin, size_t end, float t) {
  for (size_t b = begin / 4; b < (end + 3) / 4; ++b) dst[b] = encodeByte(g, r, end, b, t);
}

void decodeAddGeneric(const uint8_t* src, float* acc, size_t begin, size_t end, float t) {
  for (size_t i = begin; i < end; ++i) acc[i] += dequantize((src[i >> 2] >> shiftOf(i)) & 3u, t);
}

void decodeGeneric(const uint8_t* src, float* out, size_t begin, size_t end, float t) {
  for (size_t i = begin; i < end; ++i) out[i] = dequantize((src[i >> 2] >> shiftOf(i)) & 3u, t);
}

constexpr Kernels kGenericKernels = {encodeGeneric, decodeAddGeneric, decodeGeneric};

}  // namespace

const Kernels& kernels() {
#if GC_CPU_X86
  if (cpu::useAvx2()) return kAvx2Kernels;
#endif
  return kGenericKernels;
}

}  // namespace mx2bit

namespace {

class Mx2bitCodec final : public Codec {
 public:
  Mx2bitCodec(float threshold, const CodecEnv& env) : t_(threshold), env_(env) {}

  std::string_view name() const override { return "2bit"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return mx2bit::encodedBytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state,
                        std::span<std::byte> out, const SliceId&) const override {
    const size_t n = in.size();
    const size_t bytes = mx2bit::encodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), bytes));
    const float* g = in.data();
    float* r = state.data();
    auto* dst = reinterpret_cast<uint8_t*>(out.data());
    const float t = t_;
    const auto encode = mx2bit::kernels().encode;
    forChunks(env_, n, 16, [&](size_t begin, size_t end) { encode(g, r, dst, begin, end, t); });
    // The tail of the last 4-byte word carries no elements; keep it zero.
    const size_t used = (n + 3) / 4;
    if (bytes > used) std::memset(dst + used, 0, bytes - used);
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), mx2bit::encodedBytes(n)));
    const auto* src = reinterpret_cast<const uint8_t*>(in.data());
    float* dst = acc.data();
    const float t = t_;
    const auto decode_add = mx2bit::kernels().decode_add;
    forChunks(env_, n, 16,
              [&](size_t begin, size_t end) { decode_add(src, dst, begin, end, t); });
    return {};
  }

  // Every value is +t, -t or +0, and (+-t) * scale == +-(t * scale): decoding with the
  // threshold scaled gives the scaled values exactly.
  Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                const SliceId&) const override {
    const size_t n = out.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), mx2bit::encodedBytes(n)));
    const auto* src = reinterpret_cast<const uint8_t*>(in.data());
    float* dst = out.data();
    const float t = t_ * scale;
    const auto decode = mx2bit::kernels().decode;
    forChunks(env_, n, 16, [&](size_t begin, size_t end) { decode(src, dst, begin, end, t); });
    return {};
  }

 private:
  float t_;
  CodecEnv env_;
};

}  // namespace

Result<std::unique_ptr<Codec>> makeMx2bitCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("2bit", params);
  const float threshold = reader.real32("threshold", 0.5f, Range::above(0),
      "an element is sent as +/-threshold once its residual-accumulated magnitude reaches it; pick it near the typical gradient magnitude (0.5 leaves small models untrained)");
  const bool error_feedback = reader.boolean("error_feedback", true,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return applyErrorFeedback(error_feedback,
                            std::unique_ptr<Codec>(new Mx2bitCodec(threshold, env)));
}

}  // namespace gcagent::compress

#include "compress/mx1bit/mx1bit.h"

#include <cstring>

#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"
#include "compress/mx1bit/mx1bit_kernels.h"
#include "compress/mx1bit/mx1bit_math.h"
#include "compress/params.h"
#include "compress/without_feedback.h"

namespace gcagent::compress {
namespace mx1bit {
namespace {

void encodeGeneric(const float* g, float* r, uint8_t* dst, size_t begin, size_t end, float t) {
  for (size_t b = begin / 8; b < (end + 7) / 8; ++b) dst[b] = encodeByte(g, r, end, b, t);
}

void decodeAddGeneric(const uint8_t* src, float* acc, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) acc[i] += dequantize(src[i >> 3] & maskOf(i));
}

constexpr Kernels kGenericKernels = {encodeGeneric, decodeAddGeneric};

}  // namespace

const Kernels& kernels() {
#if GC_CPU_X86
  if (cpu::useAvx2()) return kAvx2Kernels;
#endif
  return kGenericKernels;
}

}  // namespace mx1bit

namespace {

class Mx1bitCodec final : public Codec {
 public:
  Mx1bitCodec(float threshold, const CodecEnv& env) : t_(threshold), env_(env) {}

  std::string_view name() const override { return "1bit"; }
  size_t stateElements(size_t n) const override { return n; }
  size_t maxEncodedBytes(size_t n) const override { return mx1bit::encodedBytes(n); }

  Result<size_t> encode(std::span<const float> in, std::span<float> state,
                        std::span<std::byte> out, const SliceId&) const override {
    const size_t n = in.size();
    const size_t bytes = mx1bit::encodedBytes(n);
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), n, out.size(), bytes));
    const float* g = in.data();
    float* r = state.data();
    auto* dst = reinterpret_cast<uint8_t*>(out.data());
    const float t = t_;
    const auto encode = mx1bit::kernels().encode;
    forChunks(env_, n, 32, [&](size_t begin, size_t end) { encode(g, r, dst, begin, end, t); });
    const size_t used = (n + 7) / 8;
    if (bytes > used) std::memset(dst + used, 0, bytes - used);
    return bytes;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    const size_t n = acc.size();
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), n, in.size(), mx1bit::encodedBytes(n)));
    const auto* src = reinterpret_cast<const uint8_t*>(in.data());
    float* dst = acc.data();
    const auto decode_add = mx1bit::kernels().decode_add;
    forChunks(env_, n, 32, [&](size_t begin, size_t end) { decode_add(src, dst, begin, end); });
    return {};
  }

 private:
  float t_;
  CodecEnv env_;
};

}  // namespace

Result<std::unique_ptr<Codec>> makeMx1bitCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("1bit", params);
  const float threshold = reader.real32("threshold", 0.0f, Range::any(),
      "elements above it are sent as +1, the rest as -1 (MXNet's 1-bit)");
  const bool error_feedback = reader.boolean("error_feedback", true,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return applyErrorFeedback(error_feedback,
                            std::unique_ptr<Codec>(new Mx1bitCodec(threshold, env)));
}

}  // namespace gcagent::compress

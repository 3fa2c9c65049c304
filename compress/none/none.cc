// fp32 passthrough: the uncompressed baseline, and the codec the agent uses for gradients
// too small to be worth compressing.
#include "compress/none/none.h"

#include "compress/cpu/cast_kernels.h"
#include "compress/cpu/checks.h"
#include "compress/cpu/chunks.h"
#include "compress/params.h"

namespace gcagent::compress {
namespace {

class NoneCodec final : public Codec {
 public:
  explicit NoneCodec(const CodecEnv& env) : env_(env) {}

  std::string_view name() const override { return "none"; }
  size_t stateElements(size_t) const override { return 0; }
  size_t maxEncodedBytes(size_t n) const override { return 4 * n; }

  Result<size_t> encode(std::span<const float> in, std::span<float> state,
                        std::span<std::byte> out, const SliceId&) const override {
    const size_t n = in.size();
    GC_RETURN_IF_ERROR(checkEncodeSpans(name(), n, state.size(), 0, out.size(), 4 * n));
    // One memcpy: the C library already picks its fastest copy for this CPU.
    castKernels(CastFormat::kF32).encode(in.data(), nullptr, out.data(), 0, n);
    return 4 * n;
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc,
                   const SliceId&) const override {
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), acc.size(), in.size(), 4 * acc.size()));
    const std::byte* src = in.data();
    float* dst = acc.data();
    const auto decode_add = castKernels(CastFormat::kF32).decode_add;
    forChunks(env_, acc.size(), 16,
              [&](size_t begin, size_t end) { decode_add(src, dst, begin, end); });
    return {};
  }

  Status decode(std::span<const std::byte> in, std::span<float> out, float scale,
                const SliceId&) const override {
    GC_RETURN_IF_ERROR(checkEncodedSize(name(), out.size(), in.size(), 4 * out.size()));
    const std::byte* src = in.data();
    float* dst = out.data();
    const auto decode = castKernels(CastFormat::kF32).decode;
    forChunks(env_, out.size(), 16, [&](size_t begin, size_t end) { decode(src, dst, begin, end, scale); });
    return {};
  }

 private:
  CodecEnv env_;
};

}  // namespace

Result<std::unique_ptr<Codec>> makeNoneCodec(const Params& params, const CodecEnv& env) {
  ParamReader reader("none", params);
  GC_RETURN_IF_ERROR(reader.finish());
  return std::unique_ptr<Codec>(new NoneCodec(env));
}

}  // namespace gcagent::compress

#include "compress/registry.h"

#include <array>
#include <string>

#include "common/build_config.h"
#include "common/str_cat.h"
#include "compress/bf16/bf16.h"
#include "compress/compll/definitions.h"
#include "compress/compll/defined_codec.h"
#include "compress/fp16/fp16.h"
#include "compress/none/none.h"
#include "compress/qsgd/qsgd.h"
#include "compress/randomk/randomk.h"
#if GCAGENT_HAVE_CUDA
#include "compress/compll/gpu_quantizer.h"
#include "compress/cuda/codecs.h"
#define GC_GPU(factory) cuda::factory
#define GC_GPU_DEFINED(Def) compll::makeGpuDefined<Def>
#else
#define GC_GPU(factory) nullptr
#define GC_GPU_DEFINED(Def) nullptr
#endif

namespace gcagent::compress {
namespace {

// A codec defined in compress/codecs/ (CompLL): its row comes from its definition.
#define GC_DEFINED_ROW(Def)                                                                                 \
  CodecInfo{codecs::Def::kName, codecs::Def::kSummary, compll::makeDefined<codecs::Def>,                 \
            GC_GPU_DEFINED(codecs::Def)},

// The one list of codecs. Names are what configs and clients send.
constexpr std::array kCodecs = {
    CodecInfo{"none", "fp32 passthrough", makeNoneCodec, GC_GPU(makeGpuNone)},
    CodecInfo{"fp16", "IEEE half precision cast", makeFp16Codec, GC_GPU(makeGpuFp16)},
    CodecInfo{"bf16", "bfloat16 cast", makeBf16Codec, GC_GPU(makeGpuBf16)},
    GC_FOR_EACH_CODEC(GC_DEFINED_ROW)
    CodecInfo{"randomk", "random-k with a shared seed, values only", makeRandomkCodec, GC_GPU(makeGpuRandomk)},
    CodecInfo{"qsgd", "QSGD stochastic quantization with s levels", makeQsgdCodec, GC_GPU(makeGpuQsgd)},
    CodecInfo{"int8", "block-scaled int8 (each block's largest magnitude) with error feedback", makeInt8Codec,
              GC_GPU(makeGpuInt8)},
};
#undef GC_DEFINED_ROW
#undef GC_GPU
#undef GC_GPU_DEFINED

}  // namespace

std::span<const CodecInfo> codecList() { return kCodecs; }

Result<std::unique_ptr<Codec>> makeCodec(std::string_view name, const Params& params,
                                         const CodecEnv& env) {
  for (const auto& info : kCodecs)
    if (info.name == name) return info.make(params, env);
  std::string names;
  for (const auto& info : kCodecs) names += strCat(names.empty() ? "" : ", ", info.name);
  return Status::notFound(strCat("unknown codec '", name, "' (known: ", names, ")"));
}

}  // namespace gcagent::compress

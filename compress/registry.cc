#include "compress/registry.h"

#include <array>
#include <string>

#include "common/build_config.h"
#include "common/str_cat.h"
#include "compress/bf16/bf16.h"
#include "compress/dgc/dgc.h"
#include "compress/fp16/fp16.h"
#include "compress/mx1bit/mx1bit.h"
#include "compress/mx2bit/mx2bit.h"
#include "compress/none/none.h"
#include "compress/onebit/onebit.h"
#include "compress/qsgd/qsgd.h"
#include "compress/randomk/randomk.h"
#include "compress/terngrad/terngrad.h"
#include "compress/threshold/threshold.h"
#include "compress/topk/topk.h"
#if GCAGENT_HAVE_CUDA
#include "compress/cuda/codecs.h"
#define GC_GPU(factory) cuda::factory
#else
#define GC_GPU(factory) nullptr
#endif

namespace gcagent::compress {
namespace {

// The one list of codecs. Names are what configs and clients send.
constexpr std::array kCodecs = {
    CodecInfo{"none", "fp32 passthrough", makeNoneCodec, GC_GPU(makeGpuNone)},
    CodecInfo{"fp16", "IEEE half precision cast", makeFp16Codec, GC_GPU(makeGpuFp16)},
    CodecInfo{"bf16", "bfloat16 cast", makeBf16Codec, GC_GPU(makeGpuBf16)},
    CodecInfo{"2bit", "MXNet 2-bit threshold quantizer with residual", makeMx2bitCodec, GC_GPU(makeGpuMx2bit)},
    CodecInfo{"1bit", "MXNet 1-bit quantizer with residual", makeMx1bitCodec, GC_GPU(makeGpuMx1bit)},
    CodecInfo{"onebit", "sign and mean-magnitude scale with error feedback", makeOnebitCodec, GC_GPU(makeGpuOnebit)},
    CodecInfo{"terngrad", "stochastic ternary with a per-slice scaler", makeTerngradCodec, GC_GPU(makeGpuTerngrad)},
    CodecInfo{"topk", "exact top-k by magnitude with residual", makeTopkCodec, GC_GPU(makeGpuTopk)},
    CodecInfo{"dgc", "deep gradient compression: momentum correction, sampled threshold", makeDgcCodec,
              GC_GPU(makeGpuDgc)},
    CodecInfo{"threshold", "drop the smallest fraction of magnitudes into the residual", makeThresholdCodec,
              GC_GPU(makeGpuThreshold)},
    CodecInfo{"randomk", "random-k with a shared seed, values only", makeRandomkCodec, GC_GPU(makeGpuRandomk)},
    CodecInfo{"qsgd", "QSGD stochastic quantization with s levels", makeQsgdCodec, GC_GPU(makeGpuQsgd)},
    CodecInfo{"int8", "block-scaled int8 (each block's largest magnitude) with error feedback", makeInt8Codec,
              GC_GPU(makeGpuInt8)},
};
#undef GC_GPU

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

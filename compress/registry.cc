#include "compress/registry.h"

#include <array>
#include <string>

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

namespace gcagent::compress {
namespace {

// The one list of codecs. Names are what configs and clients send.
constexpr std::array kCodecs = {
    CodecInfo{"none", "fp32 passthrough", makeNoneCodec},
    CodecInfo{"fp16", "IEEE half precision cast", makeFp16Codec},
    CodecInfo{"bf16", "bfloat16 cast", makeBf16Codec},
    CodecInfo{"2bit", "MXNet 2-bit threshold quantizer with residual", makeMx2bitCodec},
    CodecInfo{"1bit", "MXNet 1-bit quantizer with residual", makeMx1bitCodec},
    CodecInfo{"onebit", "sign and mean-magnitude scale with error feedback", makeOnebitCodec},
    CodecInfo{"terngrad", "stochastic ternary with a per-slice scaler", makeTerngradCodec},
    CodecInfo{"topk", "exact top-k by magnitude with residual", makeTopkCodec},
    CodecInfo{"dgc", "deep gradient compression: momentum correction, sampled threshold", makeDgcCodec},
    CodecInfo{"threshold", "drop the smallest fraction of magnitudes into the residual", makeThresholdCodec},
    CodecInfo{"randomk", "random-k with a shared seed, values only", makeRandomkCodec},
    CodecInfo{"qsgd", "QSGD stochastic quantization with s levels", makeQsgdCodec},
};

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

#include "compress/bf16/bf16.h"

#include "compress/bf16/bf16_math.h"
#include "compress/cpu/cast_codec.h"
#include "compress/params.h"

namespace gcagent::compress {
namespace {

struct Bf16Math {
  static uint16_t fromFloat(float v) { return bf16::fromFloat(v); }
  static float toFloat(uint16_t h) { return bf16::toFloat(h); }
};

}  // namespace

Result<std::unique_ptr<Codec>> makeBf16Codec(const Params& params, const CodecEnv& env) {
  ParamReader reader("bf16", params);
  const bool error_feedback = reader.boolean("error_feedback", false);
  GC_RETURN_IF_ERROR(reader.finish());
  return std::unique_ptr<Codec>(new CastCodec<Bf16Math>("bf16", error_feedback, env));
}

}  // namespace gcagent::compress

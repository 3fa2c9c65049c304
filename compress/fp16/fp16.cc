#include "compress/fp16/fp16.h"

#include "compress/fp16/fp16_math.h"
#include "compress/cpu/cast_codec.h"
#include "compress/params.h"

namespace gcagent::compress {
namespace {

struct Fp16Math {
  static uint16_t fromFloat(float v) { return fp16::fromFloat(v); }
  static float toFloat(uint16_t h) { return fp16::toFloat(h); }
};

}  // namespace

Result<std::unique_ptr<Codec>> makeFp16Codec(const Params& params, const CodecEnv& env) {
  ParamReader reader("fp16", params);
  const bool error_feedback = reader.boolean("error_feedback", false);
  GC_RETURN_IF_ERROR(reader.finish());
  return std::unique_ptr<Codec>(new CastCodec<Fp16Math>("fp16", error_feedback, env));
}

}  // namespace gcagent::compress

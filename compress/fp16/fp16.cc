#include "compress/fp16/fp16.h"

#include "compress/cpu/cast_codec.h"
#include "compress/params.h"

namespace gcagent::compress {

Result<std::unique_ptr<Codec>> makeFp16Codec(const Params& params, const CodecEnv& env) {
  ParamReader reader("fp16", params);
  const bool error_feedback = reader.boolean("error_feedback", false,
      kErrorFeedbackHelp);
  GC_RETURN_IF_ERROR(reader.finish());
  return std::unique_ptr<Codec>(new CastCodec("fp16", CastFormat::kFp16, error_feedback, env));
}

}  // namespace gcagent::compress

#include "compress/terngrad/terngrad.h"

namespace gcagent::compress {

// Interim: replaced by the real codec in this same change.
Result<std::unique_ptr<Codec>> makeTerngradCodec(const Params&, const CodecEnv&) {
  return Status::failedPrecondition("codec 'terngrad' is not built yet");
}

}  // namespace gcagent::compress

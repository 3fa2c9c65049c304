#include "compress/topk/topk.h"

namespace gcagent::compress {

// Interim: replaced by the real codec in this same change.
Result<std::unique_ptr<Codec>> makeTopkCodec(const Params&, const CodecEnv&) {
  return Status::failedPrecondition("codec 'topk' is not built yet");
}

}  // namespace gcagent::compress

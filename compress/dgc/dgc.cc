#include "compress/dgc/dgc.h"

namespace gcagent::compress {

// Interim: replaced by the real codec in this same change.
Result<std::unique_ptr<Codec>> makeDgcCodec(const Params&, const CodecEnv&) {
  return Status::failedPrecondition("codec 'dgc' is not built yet");
}

}  // namespace gcagent::compress

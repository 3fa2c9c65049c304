#include "compress/randomk/randomk.h"

namespace gcagent::compress {

// Interim: replaced by the real codec in this same change.
Result<std::unique_ptr<Codec>> makeRandomkCodec(const Params&, const CodecEnv&) {
  return Status::failedPrecondition("codec 'randomk' is not built yet");
}

}  // namespace gcagent::compress

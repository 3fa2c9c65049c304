#include "compress/qsgd/qsgd.h"

namespace gcagent::compress {

// Interim: replaced by the real codec in this same change.
Result<std::unique_ptr<Codec>> makeQsgdCodec(const Params&, const CodecEnv&) {
  return Status::failedPrecondition("codec 'qsgd' is not built yet");
}

}  // namespace gcagent::compress

#include "compress/threshold/threshold.h"

namespace gcagent::compress {

// Interim: replaced by the real codec in this same change.
Result<std::unique_ptr<Codec>> makeThresholdCodec(const Params&, const CodecEnv&) {
  return Status::failedPrecondition("codec 'threshold' is not built yet");
}

}  // namespace gcagent::compress

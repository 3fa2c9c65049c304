#include "compress/onebit/onebit.h"

namespace gcagent::compress {

// Interim: replaced by the real codec in this same change.
Result<std::unique_ptr<Codec>> makeOnebitCodec(const Params&, const CodecEnv&) {
  return Status::failedPrecondition("codec 'onebit' is not built yet");
}

}  // namespace gcagent::compress

#pragma once

#include <memory>

#include "compress/codec.h"

namespace gcagent::compress {

Result<std::unique_ptr<Codec>> makeQsgdCodec(const Params& params, const CodecEnv& env);
// Block-scaled int8: qsgd's format with each block's largest magnitude as its scale (qsgd.cc).
Result<std::unique_ptr<Codec>> makeInt8Codec(const Params& params, const CodecEnv& env);

}  // namespace gcagent::compress

#pragma once

#include <memory>

#include "compress/codec.h"

namespace gcagent::compress {

Result<std::unique_ptr<Codec>> makeNoneCodec(const Params& params, const CodecEnv& env);

}  // namespace gcagent::compress

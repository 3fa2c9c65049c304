#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "compress/codec.h"

namespace gcagent::compress {

Result<std::unique_ptr<Codec>> makeRandomkCodec(const Params& params, const CodecEnv& env);

namespace randomk {
// The k distinct indices in [0, n), ascending, that sender and receiver draw for a stream
// (see randomk.cc); the GPU codec draws them with the same function.
std::vector<uint32_t> drawIndices(size_t n, size_t k, uint64_t stream);
}  // namespace randomk

}  // namespace gcagent::compress

// The slice protocol between agents: every slice names the codec its bytes are in by a
// fingerprint (name and parameters, marked for results and for the mxnet policy), so nodes
// that disagree refuse each other's slices instead of mixing semantics, and a slice sent
// uncompressed is recognised whatever the tensor's codec. checkSlice() is what a received
// slice must satisfy before its bytes are used.
#pragma once

#include <cstdint>

#include "agent/engine/ring_hop.h"
#include "agent/wire/slice_message.h"
#include "agent/engine/tensor_route.h"
#include "common/status.h"
#include "compress/codec.h"

namespace gcagent::agent {

uint32_t contributionFingerprint(const compress::CodecSpec& codec, bool mxnet);
uint32_t resultFingerprint(const compress::CodecSpec& codec);
// Of slices sent uncompressed.
uint32_t rawContributionFingerprint();
uint32_t rawResultFingerprint();

// Whether a received slice of `route`'s tensor is in its codec (true) or uncompressed
// (false), once it checks out: the tensor's size, its topology, the codec, and who may send
// it. Under ps that is any node for a contribution to its owner (this node), the owner for
// a result; under ring (`hop` this node's place in the slice's ring), the predecessor, for a
// contribution unless this node starts the sum, for a result unless it owns the slice; under
// allgather, any member for a contribution and nobody for a result. The error names the
// tensor.
Result<bool> checkSlice(const SliceMessage& h, const TensorRoute& route, uint32_t owner, uint32_t self, uint32_t from,
                        const RingHop* hop = nullptr);

}  // namespace gcagent::agent

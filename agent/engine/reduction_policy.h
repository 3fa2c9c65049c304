// How a tensor's contributions are combined and what its caller gets back, chosen per tensor
// by the client at declare time through codec parameters named reduce.* (the codec never
// sees them):
//   reduce.aggregation = bidirectional (default) | mxnet
//   reduce.result      = average (default) | sum
//   reduce.topology    = ps | ring | allgather | auto (default: the agent's scheduler.topology)
//   reduce.contributor = a local rank (default: every local trainer)
//   reduce.owner       = a node rank (default: every slice's owner by round robin, the result to all)
//
// bidirectional: a slice's owner adds its own node's sum exactly; every other node sends
//   its sum encoded with its own residual; the owner encodes the total with its own residual
//   and every node decodes those same bytes. Both directions are compressed: the least
//   traffic, and the result carries a second compression error.
// mxnet: as MXNet's dist_sync kvstore with gradient compression. Every node, the owner
//   included, encodes its sum with its own residual; the owner adds the decoded
//   contributions in fp32, in rank order; the total travels uncompressed, so the caller
//   gets exactly that sum. Every tensor is compressed whatever its size (the planner and
//   compress.min_elements are not asked), as MXNet compresses every dense fp32 key.
//
// ps: each slice has an owner agent that every node sends its contribution to, and that
//   sends the result back to every node (a sharded parameter server, above).
// ring: CaSync-Ring (agent/engine/ring_hop.h). A slice's partial sum travels once round the ring of
//   agents in rank order, each adding its own share and re-encoding with a residual of its
//   own, and ends at the slice's owner; the owner encodes the total once and that result
//   goes round the ring again, forwarded as is. Every node sends to one neighbour only.
//   Bidirectional only: mxnet's semantics are a parameter server's.
// allgather: every node sends its encoded contribution to every other node, and each node
//   decodes all of them and sums them in rank order, its own decoded from its own encoding:
//   the same bits everywhere, one compression error, nothing re-encoded. For the sparse
//   codecs, whose sum at an owner is denser than any contribution. Results do not travel.
//   Bidirectional only, as ring.
// auto: one of the three per tensor, from the reference cost model
//   (scheduler/topology_model.h), the same on every node.
//
// contributor: only that local trainer of each node contributes the tensor and gets its
//   result (a shard it alone holds, as FSDP's HSDP shards a node's parameters among its
//   trainers); the others declare it but never submit it. Its nodes' contributions are then
//   one trainer's each, so its average is over the nodes.
//
// owner: the tensor is reduced to that node alone (MPI's reduce, one root): it owns every
//   slice, every node sends it its share, and the result stays there; the other nodes
//   complete once their shares are on their way, their buffers left as they were. The pieces
//   of a reduce-scatter: one such tensor per node, each node's region of a gradient (FSDP
//   without replication). Parameter server only; the result is never re-encoded.
//
// A sum is returned as summed; an average is that sum divided once by the number of
// trainers that contributed (never scaled twice).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"
#include "compress/codec.h"
#include "scheduler/topology_model.h"

namespace gcagent::agent {

enum class Aggregation { kBidirectional, kMxnet };
enum class ResultKind { kAverage, kSum };
using scheduler::Topology;

struct ReductionPolicy {
  Aggregation aggregation = Aggregation::kBidirectional;
  ResultKind result = ResultKind::kAverage;
  std::optional<Topology> topology{};  // unset: the agent's default (scheduler.topology)
  std::optional<uint32_t> contributor{};  // the one local rank that contributes it; unset: every one
  std::optional<uint32_t> owner{};        // the node it is reduced to; unset: all-reduced
  bool operator==(const ReductionPolicy&) const = default;
};

std::string_view aggregationName(Aggregation a);
std::string_view resultName(ResultKind r);
using scheduler::parseTopology;
using scheduler::topologyName;
// "mxnet, sum", and the topology and contributor when the tensor chose them:
// "bidirectional, average, ring, local rank 1 alone"
std::string describe(const ReductionPolicy& p);

// Takes the reduce.* entries out of a tensor's parameters (what is left belongs to the
// codec). An unknown reduce.* name or value is an error naming it and the choices.
Result<ReductionPolicy> takeReductionPolicy(compress::Params& params);

}  // namespace gcagent::agent

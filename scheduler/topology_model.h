// Which topology a tensor travels by under scheduler.topology = auto. The SeCoPa primitives
// (cost_model.h: encode, decode, link, add, each `w*x + b` above a threshold) priced over what
// one node does in each topology, slice by slice:
//   ps:        sends 2(N-1)/N of the tensor encoded (contributions out, results back) to N-1
//              peers; encodes every slice once (its shares, or its results as an owner);
//              decodes and adds (N-1)/N of it as an owner, and decodes every result into the
//              trainers' buffers.
//   ring:      the same bytes and codec work, to one peer; but 2(N-1) hops deep.
//   allgather: sends all of its encoded tensor to N-1 peers; encodes once, decodes N shares
//              into a sum of every slice, and copies the sum into the trainers' buffers.
// A reduction costs its critical path (one slice through every step, each link trip with
// its latency) plus the larger of the node's work and its time on the wire at the link's
// rate, which the engine overlaps (codec pool, comm thread). The node's work is its codec
// work and the network stack's CPU time for every byte it sends or receives
// (kStackCpuPerElement). Sending to several peers at once costs kFanOutPenalty more wire
// time per extra peer: TCP flows sharing a link do not fill it as one flow does (measured
// below).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "scheduler/cost_model.h"

namespace gcagent::scheduler {

// kAuto is a choice made per tensor at declare time; a slice always names the chosen one.
enum class Topology : uint8_t { kPs = 0, kRing = 1, kAllgather = 2, kAuto = 3 };

std::string_view topologyName(Topology t);
// "ps", "ring", "allgather" or "auto"; the error names the choices.
Result<Topology> parseTopology(std::string_view name);

// VGG-16 uncompressed at 1 Gbit/s on 4 namespaced nodes: the same 833 MB per node took
// 7.61 s as a parameter server (3 peers) and 7.16 s as a ring (1 peer), 6.3 % more for 2
// more peers (bench/results/e2e_topologies.md).
inline constexpr double kFanOutPenalty = 0.03;

// The network stack's CPU seconds per fp32 element (4 bytes) a node sends or receives over
// TCP. ResNet-50 uncompressed at 10 Gbit/s on 4 namespaced nodes, parameter server: 195 ms
// of agent CPU per iteration, for 153.8 MB sent and as much received per node, of which the
// model's copies and adds are 71 ms (bench/results/e2e_topologies.md).
inline constexpr double kStackCpuPerElement = 1.6e-9;

struct TopologyCosts {
  double ps = 0, ring = 0, allgather = 0;
  // The cheapest; ties go to ps, then ring.
  Topology cheapest() const;
  std::string describe() const;
};

// One node's seconds to reduce `elements` fp32 elements in slices of `slice_elements` over
// `nodes` nodes, every slice encoded to `ratio` of its size (compressed), or raw.
TopologyCosts topologyCosts(const StepCosts& c, double elements, double slice_elements, uint32_t nodes,
                            bool compressed, double ratio);

// auto's choice for a job without a codec, the same for all of its tensors (see below why):
// the ring on 3 nodes or more when the parameter server's N-1 flows per link would bound it
// (its time on the wire, with the fan-out penalty, above its work per element) and the
// ring's single flow would not; otherwise ps. At 1 Gbit/s the ring's flow fills the link
// better than ps's (ResNet-50 on 8 nodes: 1.52 s against 1.68 s); on a fast link the node's
// CPU bounds both, and the ring's 2(N-1) hops deep path is what remains (ResNet-50 at
// 10 Gbit/s on 4 nodes: 0.44 s against 0.39 s). Rests on per-element rates only, so it does
// not depend on a tensor's size.
Topology uncompressedJobTopology(const StepCosts& c, double slice_elements, uint32_t nodes);

// auto's choice for a tensor with a codec: for a compressed tensor the cheaper of ps and
// allgather (ties: ps); an uncompressed one (below min_elements) goes to ps. (A tensor
// without a codec: uncompressedJobTopology.) Measured, choices beyond
// that lose:
// - the ring pays off only when a whole job travels it: ResNet-50 at 1 Gbit/s on 8 nodes took
//   1.55 s all ring, 1.65 s all ps, and 2.43 s with its 5 largest tensors on the ring and the
//   rest ps (each of a slice's 2(N-1) hops waits behind the other tensors' codec work, at
//   their priority). A topology must not change under a tensor in flight, and shims declare
//   a job's tensors piecemeal, so the choice rests on the tensor alone: its codec;
// - with a codec the ring adds a compression error per hop and was slower (VGG-16 2bit at
//   1 Gbit/s: 1.02-1.11 s against 0.85-0.87 s);
// - an uncompressed allgather sends N/2 times the bytes (the same at N = 2), makes every node
//   sum every slice, and its N-1 full-size flows per link lose packets at a shaper:
//   ResNet-50 at 1 Gbit/s took 0.97 s against ps's 0.86 s on 2 nodes (equal bytes), and
//   2.8-7.7 s against 1.3 s on 4 nodes (2.46 s at the link's rate).
// The costs of all three are still logged with the choice.
Topology chooseTopology(const TopologyCosts& costs, bool compressed);

}  // namespace gcagent::scheduler

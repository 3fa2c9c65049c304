// Where one slice's traffic goes from this node under each topology: the one place that says
// what ps, ring and allgather mean (agent/engine/reduction_policy.h); the engine only follows it.
//   ps:        a node sends its share to the slice's owner; the owner adds its own share
//              exactly, merges every member's in rank order and sends the result to all.
//   ring:      the owner's successor sends its share on; every other node merges the
//              predecessor's partial sum with its own exact share and sends the sum on (the
//              owner's sum is the result); a result is forwarded until the owner's
//              predecessor (ring_hop.h).
//   allgather: every node sends its encoded share to every other and merges all of them,
//              its own decoded from its encoding, into the result here; nothing goes back.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "agent/engine/owner_side.h"
#include "agent/engine/reduction_policy.h"

namespace gcagent::agent {

struct SliceFlow {
  std::vector<uint32_t> share_to;  // the peers this node's share is sent to
  bool share_merged_here = false;  // this node's share joins the sum made here
  bool share_exact = false;        // ...added raw, never encoded
  SumShape sum;                    // who the sum made here merges, and whether it is the result
  std::vector<uint32_t> sum_to;    // where that sum goes once encoded
  std::vector<uint32_t> result_forward;  // where a result received here is passed on
};

// What a topology asks of the engine beyond one slice's flow.
struct TopologyTraits {
  // A node completes a step once it merged every share, before its own shares have all left
  // (allgather): its lanes must still send them, even after its trainers left.
  bool shares_outlive_step = false;
  // A slice's flow depends on this node's place in the ring, not only on the slice's owner
  // (ring): every slice's hop moves when the members change.
  bool hops = false;
};
TopologyTraits traitsOf(Topology topology);

// `members`: ascending ranks, `owner` and `self` among them. `own_share_encoded`: the mxnet
// policy with a compressed tensor, whose owner encodes its own share like every other node.
// `result_kept`: a tensor reduced to its owner (reduce.owner): under ps the result stays there.
SliceFlow sliceFlowOf(Topology topology, bool own_share_encoded, std::span<const uint32_t> members, uint32_t owner,
                      uint32_t self, bool result_kept = false);

}  // namespace gcagent::agent

#include "agent/engine/slice_flow.h"

#include "agent/engine/ring_hop.h"

namespace gcagent::agent {
namespace {

std::vector<uint32_t> othersThan(std::span<const uint32_t> members, uint32_t self) {
  std::vector<uint32_t> out;
  for (uint32_t r : members)
    if (r != self) out.push_back(r);
  return out;
}

}  // namespace

SliceFlow sliceFlowOf(Topology topology, bool own_share_encoded, std::span<const uint32_t> members, uint32_t owner,
                      uint32_t self, bool result_kept) {
  SliceFlow f;
  switch (topology) {
    case Topology::kRing: {
      const RingHop hop = ringHopOf(members, owner, self);
      if (hop.starts) {
        f.share_to = {hop.successor};
      } else {
        f.share_merged_here = f.share_exact = true;
        f.sum = {{hop.predecessor, self}, hop.owns};
        if (hop.successor != self) f.sum_to = {hop.successor};
      }
      if (hop.forwards_result) f.result_forward = {hop.successor};
      return f;
    }
    case Topology::kAllgather:
      f.share_to = othersThan(members, self);
      f.share_merged_here = true;
      return f;  // the default sum: every member in rank order, the result, kept here
    case Topology::kPs:
    case Topology::kAuto:  // resolved at declare time; never reaches a slice
      break;
  }
  if (owner != self) {
    f.share_to = {owner};
    return f;
  }
  f.share_merged_here = true;
  f.share_exact = !own_share_encoded;
  if (!result_kept) f.sum_to = othersThan(members, self);
  return f;
}

TopologyTraits traitsOf(Topology topology) {
  return {topology == Topology::kAllgather, topology == Topology::kRing};
}

}  // namespace gcagent::agent

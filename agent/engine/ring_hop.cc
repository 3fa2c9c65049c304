#include "agent/engine/ring_hop.h"

#include <algorithm>

namespace gcagent::agent {

RingHop ringHopOf(std::span<const uint32_t> members, uint32_t owner, uint32_t self) {
  const size_t n = members.size();
  const auto position = [&](uint32_t rank) {
    return static_cast<size_t>(std::lower_bound(members.begin(), members.end(), rank) - members.begin());
  };
  const size_t me = position(self), at_owner = position(owner);
  RingHop hop;
  hop.predecessor = members[(me + n - 1) % n];
  hop.successor = members[(me + 1) % n];
  hop.owns = me == at_owner;
  hop.starts = n > 1 && me == (at_owner + 1) % n;
  hop.forwards_result = !hop.owns && hop.successor != owner;
  return hop;
}

}  // namespace gcagent::agent

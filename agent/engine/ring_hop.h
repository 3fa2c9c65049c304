// Where a node stands in the ring of one slice (CaSync-Ring, HiPress): the members in rank
// order form a ring, and each slice's ring ends at the slice's owner. Its partial sum starts
// at the owner's successor, which sends its own contribution; every node after it adds its
// own and passes the sum on, up to the owner, which completes it. The owner's result then
// goes round once from its successor to its predecessor, each node passing on the bytes it
// received. Every node sends to its successor only, and receives from its predecessor only.
#pragma once

#include <cstdint>
#include <span>

namespace gcagent::agent {

struct RingHop {
  uint32_t predecessor = 0;  // the rank this node receives from
  uint32_t successor = 0;    // the rank it sends to
  bool starts = false;       // it begins the partial sum with its own contribution
  bool owns = false;         // it completes the sum and begins the result's round
  bool forwards_result = false;  // it passes the result on (its successor is not the owner)
};

// `members`: ascending ranks, `owner` and `self` among them. With one member, the node is
// its own predecessor and successor, and owns without starting.
RingHop ringHopOf(std::span<const uint32_t> members, uint32_t owner, uint32_t self);

}  // namespace gcagent::agent

// The header of every slice that travels between agents, a peer frame (agent/wire/peer_frame.h)
// of the fields frameFields lists. A contribution carries one node's locally reduced slice to the slice's owner; a result
// carries the owner's sum of every node back. Under the ring topology a contribution is a
// partial sum passed to the next node, and a result is passed on round the ring; under
// allgather a contribution goes to every node and no result travels (agent/engine/slice_flow.h).
// The fingerprint and the sizes let a receiver refuse a slice it would otherwise decode with
// the wrong codec or into the wrong tensor; the view (epoch and proposer), one sent under
// another membership (agent/membership/membership_view.h); the topology, one sent by a node that routes the tensor
// otherwise.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "agent/engine/reduction_policy.h"
#include "common/status.h"

namespace gcagent::agent {

enum class SliceKind : uint8_t { kContribution = 1, kResult = 2 };

struct SliceMessage {
  SliceKind kind = SliceKind::kContribution;
  uint64_t job = 0;
  uint64_t key = 0;
  uint64_t iteration = 0;
  uint32_t slice = 0;
  uint32_t slice_count = 0;
  uint64_t tensor_elements = 0;
  uint32_t codec_fingerprint = 0;
  uint32_t contributors = 0;  // trainers whose gradients the slice sums
  uint32_t view = 0;          // the membership epoch it was sent under
  Topology topology = Topology::kPs;
  uint32_t view_proposer = 0;  // with `view`, the membership's identity
  bool operator==(const SliceMessage&) const = default;
};

// Its fields in wire order (agent/wire/peer_frame.h).
template <class M, class F>
  requires std::same_as<std::remove_const_t<M>, SliceMessage>
void frameFields(M& m, F& f) {
  f.num(m.kind);
  f.num(m.topology);
  f.num(m.job);
  f.num(m.key);
  f.num(m.iteration);
  f.num(m.slice);
  f.num(m.slice_count);
  f.num(m.tensor_elements);
  f.num(m.codec_fingerprint);
  f.num(m.contributors);
  f.num(m.view);
  f.num(m.view_proposer);
}
// The kind and topology known, the slice within the count, the sizes consistent.
Status checkFrame(const SliceMessage& m, uint32_t world);

}  // namespace gcagent::agent

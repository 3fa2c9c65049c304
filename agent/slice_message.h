// The header of every slice that travels between agents, in the transport's header field:
//   u32 magic "GCAS" | u16 version | u8 kind | u8 topology
//   u64 job | u64 key | u64 iteration | u32 slice | u32 slice_count
//   u64 tensor elements | u32 codec fingerprint | u32 contributors | u32 view epoch
//   | u32 view proposer
// A contribution carries one node's locally reduced slice to the slice's owner; a result
// carries the owner's sum of every node back. Under the ring topology a contribution is a
// partial sum passed to the next node, and a result is passed on round the ring; under
// allgather a contribution goes to every node and no result travels (agent/slice_flow.h).
// The fingerprint and the sizes let a receiver refuse a slice it would otherwise decode with
// the wrong codec or into the wrong tensor; the view (epoch and proposer), one sent under
// another membership (agent/membership_view.h); the topology, one sent by a node that routes the tensor
// otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "agent/reduction_policy.h"
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

inline constexpr size_t kSliceHeaderBytes = 64;

std::vector<std::byte> encodeSliceHeader(const SliceMessage& m);
// Checks magic, version, kind, and the internal consistency of the fields.
Result<SliceMessage> parseSliceHeader(std::span<const std::byte> bytes);

}  // namespace gcagent::agent

// A tensor's error-feedback state as this node holds it, in one self-describing blob that a
// trainer keeps in its checkpoint: the node's residual of each slice (what its encodings owe
// the owners) and, for the slices this node owns, the result residual (what the owner's
// encodings of the sums owe every node) and a ring hop's. A restart that puts the blob back
// before the tensor's next step continues with the residuals it had, bit for bit.
//
// The blob names what it is valid for. The tensor's size, slicing and codecs must match its
// declaration (else the state belongs to another model or another configuration: refused).
// The owner's parts belong to this node's place in the job (its rank, the node count and the
// topology): under another layout those slices have other owners, so they are dropped and
// counted, and the node's own parts still apply.
//
//   u32 magic "GCRS" | u16 version | u16 0
//   u64 key | u64 elements | u64 slice_elements | u32 push fingerprint | u32 pull fingerprint
//   str push codec | str pull codec | u32 node rank | u32 node count | u8 topology
//   u32 parts, each: u8 kind | u32 slice | u64 floats | the floats (fp32, little-endian)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace gcagent::agent {

enum class ResidualKind : uint8_t {
  kNode = 1,    // the node's residual of a slice
  kResult = 2,  // an owner's residual of a slice's result
  kHop = 3,     // a ring hop's residual of its partial sums of a slice
};

struct ResidualPart {
  ResidualKind kind = ResidualKind::kNode;
  uint32_t slice = 0;
  std::vector<float> values;  // the codec's whole state of the slice (Codec::stateElements)
  bool operator==(const ResidualPart&) const = default;
};

// What the state is valid for.
struct ResidualLayout {
  uint64_t key = 0;
  uint64_t elements = 0;
  uint64_t slice_elements = 0;
  uint32_t push_fp = 0, pull_fp = 0;  // the codecs' fingerprints (agent/engine/slice_protocol.h)
  std::string push_codec, pull_codec;  // their names, for messages
  uint32_t node_rank = 0, node_count = 0;
  uint8_t topology = 0;
  bool operator==(const ResidualLayout&) const = default;
};

struct ResidualState {
  ResidualLayout layout;
  std::vector<ResidualPart> parts;
  bool operator==(const ResidualState&) const = default;
};

std::vector<std::byte> encodeResidualState(const ResidualState& state);
// Parses and bounds-checks a blob; the error names the field.
Result<ResidualState> decodeResidualState(std::span<const std::byte> blob);

// Why a state of `saved` cannot apply to a tensor declared as `declared` (empty: it can): a
// key, size, slicing or codec that differs, named. The node's place is not compared here.
std::string mismatchOf(const ResidualLayout& saved, const ResidualLayout& declared);
// Whether the owner's parts of `saved` apply where `declared` is: the same rank, node count
// and topology.
bool sameOwnership(const ResidualLayout& saved, const ResidualLayout& declared);

}  // namespace gcagent::agent

// One frame format for every message one agent sends another, in the transport's header
// field (a slice's payload travels beside it):
//   u32 magic "GCAP" | u8 version | u8 kind | u16 zero | u32 body bytes | body
// The body is the kind's fields in the order its frameFields() lists them, little-endian:
// integers and enums as themselves, a text as u16 length and bytes, a rank list as u16 count
// and u32 ranks, an optional part as u8 0 or 1 and its fields. Each message type declares its
// fields once (beside the type), and encodePeerFrame and parsePeerFrame are the only code
// that writes or reads them; parsePeerFrame checks the header, the body's length, every
// count against what is left, and then the kind's own rules (its check()), naming the kind
// and the field in every error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "agent/wire/job_notice.h"
#include "agent/wire/outcome_query.h"
#include "agent/membership/membership_view.h"
#include "agent/wire/slice_message.h"
#include "common/status.h"

namespace gcagent::agent {

enum class FrameKind : uint8_t {
  kSlice = 1, kJobNotice = 2, kRealign = 3, kMembership = 4, kOutcomeQuery = 5, kOutcomeAnswer = 6
};

inline constexpr uint32_t kPeerFrameMagic = 0x50414347;  // "GCAP"
inline constexpr uint8_t kPeerFrameVersion = 2;  // 2: RealignNotice::reload_from
inline constexpr size_t kPeerFrameHeaderBytes = 12;

using PeerMessage =
    std::variant<SliceMessage, JobNotice, RealignNotice, MembershipNotice, OutcomeQuery, OutcomeAnswer>;

std::vector<std::byte> encodePeerFrame(const PeerMessage& message);
// `world`: the number of nodes, which every rank in the frame must be below.
Result<PeerMessage> parsePeerFrame(std::span<const std::byte> bytes, uint32_t world);
// The kind of a frame that starts with the magic, without parsing it (for routing).
std::optional<FrameKind> peerFrameKind(std::span<const std::byte> bytes);

}  // namespace gcagent::agent

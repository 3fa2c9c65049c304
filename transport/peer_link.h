// The connection state of one peer, kept apart from the data that flows on its link: the
// link layer (link_supervisor.h) moves a peer through these states; a backend never sees them.
//
//   kIdle ─dial─> kAuthenticating ─admitted─> kConnecting ─hello/ack─> kUp
//                     │ refused,                  │ set-up            │ failed, silent,
//                     │ unreachable               │ timeout           │ replaced
//                     v                           v                   v
//                  kPaused <──────────────────────┴───────────────────┘
//                     └─ pause over: dial again (lower rank), or wait for the peer's dial
//
// The higher rank of a pair never dials: it waits in kIdle (or kPaused) until the lower
// rank's handshake reaches its gate. A new admission replaces the link in any state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "transport/link_backend.h"

namespace gcagent::transport {

enum class LinkState {
  kIdle,            // no link, none being made
  kPaused,          // no link; the next attempt waits for retry_at
  kAuthenticating,  // the gate runs the handshake this side dialed
  kConnecting,      // admitted: the backend link is open, hello and ack under way
  kUp,              // both sides heard each other's hello or ack: data flows
};

inline std::string_view linkStateName(LinkState s) {
  switch (s) {
    case LinkState::kIdle: return "idle";
    case LinkState::kPaused: return "paused";
    case LinkState::kAuthenticating: return "authenticating";
    case LinkState::kConnecting: return "connecting";
    case LinkState::kUp: return "up";
  }
  return "?";
}

struct PeerLink {
  std::string address;  // host:port of the peer's gate
  LinkState state = LinkState::kIdle;
  std::optional<LinkId> link;          // the backend link, from kConnecting on
  std::optional<SteadyTime> retry_at;  // kPaused: when to dial again (none: at once)
  uint64_t send_key = 0;               // this link's keys (handshake.h), set when admitted
  uint64_t recv_key = 0;
  SteadyTime opened{};                 // kConnecting and kUp: when the gate admitted the link
  SteadyTime last_heard{};             // kUp: any frame from the peer on this link
  SteadyTime next_heartbeat{};         // kUp

  bool up() const { return state == LinkState::kUp; }
};

}  // namespace gcagent::transport

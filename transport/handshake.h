// The peer handshake, without I/O: framing and the two sides' state machines. It runs on a
// TCP connection of the agent's own (link_gate.h) before UCX sees a byte from the peer, so a
// stranger meets only this bounded parser. Every new link, connector (lower rank) to
// acceptor (higher rank):
//   hello      C -> A  connector's rank, the group size, connector's nonce
//   challenge  A -> C  acceptor's rank, acceptor's nonce, acceptor's proof, acceptor's UCX address
//   proof      C -> A  connector's proof, connector's UCX address
//   welcome    A -> C  the acceptor admitted the link
//   refusal    either  why the link was refused (text), then the connection closes
// Proofs are HMAC-SHA256 over both ranks and both nonces with the cluster token (auth.h);
// the link keys that tag every later UCX message of the link are derived the same way and
// never sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "transport/auth.h"
#include "transport/transport.h"

namespace gcagent::transport {

inline constexpr size_t kFrameHeaderBytes = 12;  // magic u32, version u8, type u8, zero u16, body bytes u32
// The largest frame body: a UCX worker address (about 200 bytes over TCP, a few KiB with many
// RDMA devices) and a proof. Nothing larger is ever read.
inline constexpr size_t kMaxFrameBody = 16 << 10;

enum class FrameType : uint8_t { kHello = 1, kChallenge = 2, kProof = 3, kWelcome = 4, kRefusal = 5 };

struct FrameHeader {
  FrameType type;
  uint32_t body_bytes;
};

// Checks magic, version, type and size before any body byte is read.
Result<FrameHeader> parseFrameHeader(std::span<const std::byte> header);
std::vector<std::byte> encodeFrame(FrameType type, std::span<const std::byte> body);

// Why a link was refused; each is counted apart.
enum class Refusal {
  kMalformed,        // not the handshake: bad framing, wrong order, wrong sizes, wrong ranks
  kUnauthenticated,  // a proof that does not hold: another cluster token
  kTimedOut,         // the handshake did not finish within its deadline
  kOverCapacity,     // too many handshakes at once, in all or from one address
};
std::string_view refusalName(Refusal r);

struct Refused {
  Refusal kind;
  Status why;
};

// Tags on every UCX message of one link, one per direction: a message whose tag is not its
// link's current one (a stranger's, or a previous link's) is dropped.
struct LinkKeys {
  uint64_t connector_to_acceptor = 0;
  uint64_t acceptor_to_connector = 0;
};

struct Admitted {
  Rank peer = 0;
  std::vector<std::byte> peer_address;  // the peer's UCX worker address
  LinkKeys keys;
  std::string remote_host;  // the peer's IP as the gate's connection saw it (set by the gate)
};

// What a side does after a frame: send `reply` (may be empty); `admitted` once the link is
// made; `refused` when it is refused (then `reply` is the refusal frame to send, if any).
struct Step {
  std::vector<std::byte> reply;
  std::optional<Admitted> admitted;
  std::optional<Refused> refused;
};

struct HandshakeSide {
  std::string token;                 // empty: proofs are not checked
  Rank rank = 0;
  Rank size = 1;
  std::vector<std::byte> address;    // this side's UCX worker address
};

class AcceptorHandshake {
 public:
  explicit AcceptorHandshake(HandshakeSide self) : self_(std::move(self)) {}
  Step onFrame(FrameType type, std::span<const std::byte> body);

 private:
  enum class Stage { kHello, kProof, kDone } stage_ = Stage::kHello;
  HandshakeSide self_;
  Rank peer_ = 0;
  Nonce connector_nonce_{};
  Nonce acceptor_nonce_{};
};

class ConnectorHandshake {
 public:
  ConnectorHandshake(HandshakeSide self, Rank peer) : self_(std::move(self)), peer_(peer) {}
  // The hello frame; fails only if the kernel has no random bytes.
  Result<std::vector<std::byte>> start();
  Step onFrame(FrameType type, std::span<const std::byte> body);

 private:
  enum class Stage { kStart, kChallenge, kWelcome, kDone } stage_ = Stage::kStart;
  HandshakeSide self_;
  Rank peer_;
  Nonce connector_nonce_{};
  Nonce acceptor_nonce_{};
  std::vector<std::byte> peer_address_;
};

}  // namespace gcagent::transport

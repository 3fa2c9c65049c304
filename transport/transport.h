// Links between the agents of a job: reliable, ordered per pair, message-oriented. One
// thread owns a transport and calls everything on it, including progress(), from which
// every handler runs; nothing here locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace gcagent::transport {

using Rank = uint32_t;

// A received message. Header and payload are valid only during the handler call, unless
// `payload_owner` is set: holding it keeps the payload valid (and unchanged) for as long, so
// a handler that works on the payload later need not copy it.
struct Message {
  Rank from;
  std::span<const std::byte> header;
  std::span<const std::byte> payload;
  std::shared_ptr<const void> payload_owner = nullptr;
};

enum class PeerEvent {
  kUp,    // the link to the peer works both ways
  kDown,  // the link failed; sends to this peer fail until it is up again
  kLeft,  // the peer said it is shutting down (goodbye()); as kDown otherwise
};

class Transport {
 public:
  using MessageHandler = std::function<void(const Message&)>;
  using PeerHandler = std::function<void(Rank peer, PeerEvent event, const Status& why)>;
  using SendDone = std::function<void(const Status&)>;

  virtual ~Transport() = default;

  virtual Rank rank() const = 0;
  virtual Rank size() const = 0;

  // Set before connect(); both run from progress().
  virtual void setHandlers(MessageHandler on_message, PeerHandler on_peer) = 0;

  // Starts connecting to every other rank; `peers` holds one address per rank, this one's
  // included. Peers come up asynchronously (PeerEvent::kUp).
  virtual Status connect(const std::vector<std::string>& peers) = 0;

  // Queues header + payload for `to`. The header is copied; the payload must stay valid and
  // unchanged until `done` runs (from progress()) with ok or the error that ended the send.
  virtual Status send(Rank to, std::span<const std::byte> header,
                      std::span<const std::byte> payload, SendDone done) = 0;

  // Completes sends, delivers messages and retries connections. Returns whether anything
  // happened. Call it when eventFd() is readable and at least every few tens of ms.
  virtual bool progress() = 0;

  // Readable when progress() has work; -1 if the transport must be polled.
  virtual int eventFd() = 0;
  // Prepares eventFd() for a wait; false means work is already pending: progress() first.
  virtual bool arm() = 0;

  virtual bool peerUp(Rank peer) const = 0;
  bool allPeersUp() const {
    for (Rank r = 0; r < size(); ++r)
      if (r != rank() && !peerUp(r)) return false;
    return true;
  }

  // Tells every peer that is up that this rank is leaving (a clean shutdown), and why: they
  // see PeerEvent::kLeft at once instead of guessing from a timeout. progress() must run a
  // moment longer for the word to leave.
  virtual void goodbye(std::string_view why) { (void)why; }

  // The address peers reach this rank at (the listener's real port when 0 was asked).
  virtual std::string listenAddress() const = 0;
};

// Splits "host:port" ("[v6]:port" too); the port may be 0 for "any".
Result<std::pair<std::string, uint16_t>> splitHostPort(std::string_view address);

// Whether the host of "host:port" resolves here; the error names the address.
Status checkResolvable(std::string_view address);

}  // namespace gcagent::transport

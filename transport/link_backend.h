// What the link layer (link_supervisor.h) needs from a backend: carry frames on links it
// opens to an address a peer gave in the handshake, and say when a link broke. Everything
// about who a peer is, whether its link is up, heartbeats and retries stays above; a backend
// knows links, not peers. Implemented by ucx/ (UCP active messages) and loopback/ (memory).
// Like Transport, a backend is used from one thread, and its events run from poll() and
// deliver() only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/transport.h"

namespace gcagent::transport {

using LinkId = uint64_t;

// What a frame is; the values are UCX's active-message ids too.
enum class FrameKind : uint8_t { kData = 1, kHello = 2, kHelloAck = 3, kHeartbeat = 6, kGoodbye = 7 };

struct BackendEvents {
  // A frame arrived. A backend may not know on which link (UCX does not say), so `header`
  // carries the sender's link prefix (link_frame.h). Returns whether a data frame's payload
  // is wanted; an unwanted one is dropped unread. Runs from poll().
  std::function<bool(FrameKind, std::span<const std::byte> header)> arrived;
  // A wanted data frame, whole, in arrival order per link. Runs from deliver(). `owner`, when
  // set, keeps `payload` valid while it is held (Message::payload_owner).
  std::function<void(std::span<const std::byte> header, std::span<const std::byte> payload,
                     std::shared_ptr<const void> owner)>
      received;
  // Link `id` broke (the peer closed, died or cannot be reached). Runs from poll().
  std::function<void(LinkId id, const Status& why)> failed;
};

class LinkBackend {
 public:
  virtual ~LinkBackend() = default;

  // Set once, before anything else.
  virtual void setEvents(BackendEvents events) = 0;

  // Where peers open links to this backend: sent to them in the handshake.
  virtual std::vector<std::byte> address() const = 0;

  // The hosts of every peer, once known: a backend with listening ports of its own admits
  // only these (ucx/source_filter.h).
  virtual void admitOnly(const std::vector<std::string>& hosts) { (void)hosts; }

  // Opens a link to the backend at `address`; frames may be sent on it at once.
  virtual Result<LinkId> open(Rank peer, std::span<const std::byte> address) = 0;

  // Sends `header` (kept until the send is done) and `payload` (the caller's: unchanged
  // until `done`). `done`, if any, runs from deliver() with how the send ended.
  virtual void send(LinkId id, FrameKind kind, std::vector<std::byte> header, std::span<const std::byte> payload,
                    Transport::SendDone done) = 0;

  // The link layer is done with link `id`: no event names it again. When its resources go
  // is the backend's business.
  virtual void retire(LinkId id) = 0;

  // Runs the I/O that is ready, without blocking; returns whether anything happened.
  virtual bool poll() = 0;
  // Runs send completions, then hands over received data frames; returns whether any ran.
  virtual bool deliver() = 0;

  virtual int eventFd() = 0;
  // Prepares eventFd() for a wait; false means work is pending already.
  virtual bool arm() = 0;
};

}  // namespace gcagent::transport

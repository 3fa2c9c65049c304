// The link layer: a Transport over any LinkBackend. It owns everything about peers that does
// not depend on how bytes move: the authenticated handshake at the gate (link_gate.h), each
// peer's connection state (peer_link.h), the hello and ack that bring a link up, heartbeats,
// liveness (a peer silent past peer_timeout is lost), and reconnection after a pause. The
// backend only opens links by address, carries frames and reports broken links.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "transport/handshake.h"
#include "transport/link_backend.h"
#include "transport/transport.h"

namespace gcagent::transport {

struct LinkOptions {
  Rank rank = 0;
  Rank size = 1;
  // host:port of this rank's peer listener (link_gate.h); port 0: any. A backend hears of a
  // peer only after the handshake there admitted it.
  std::string listen = "0.0.0.0:0";
  size_t max_handshakes = 64;             // peer handshakes at once, in all
  size_t max_handshakes_per_address = 8;  // and from one remote address
  double reconnect_seconds = 0.2;         // pause between attempts to reach a peer that is down
  // Cluster token: each link runs a mutual HMAC-SHA256 challenge-response on it (at the
  // gate) before the backend connects. Empty: peers are not checked (they still run the
  // handshake).
  std::string token;
  // A peer heard from neither by message nor by heartbeat for this long is declared lost
  // (PeerEvent::kDown with a deadline-exceeded status); a link set-up that takes longer is
  // abandoned and retried.
  double peer_timeout_seconds = 10;
  double heartbeat_seconds = 1;  // every up peer gets a heartbeat at this interval
  // Called (from progress()) for every refused link: counted by kind; the gate logs it.
  std::function<void(const Refused&)> on_refused;
  // Called when the peer listener cannot accept (out of descriptors); it retries.
  std::function<void(const Status&)> on_accept_failed;
  // The clock of heartbeats, peer and handshake timeouts and reconnect pauses.
  SteadyNow now = steadyNow;
};

// `name` prefixes the transport's errors ("ucx: peer 2 is not connected").
Result<std::unique_ptr<Transport>> superviseLinks(const LinkOptions& options, std::unique_ptr<LinkBackend> backend,
                                                  std::string name);

}  // namespace gcagent::transport

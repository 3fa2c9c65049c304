// The transport over UCX (UCP active messages): RDMA where the fabric has it, TCP otherwise.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/clock.h"
#include "transport/handshake.h"
#include "transport/transport.h"

namespace gcagent::transport {

struct UcxOptions {
  Rank rank = 0;
  Rank size = 1;
  // host:port of this rank's own peer listener (link_gate.h); port 0: any. UCX itself never
  // listens on it: a link reaches UCX only after the handshake there admitted it.
  std::string listen = "0.0.0.0:0";
  // UCX's network devices (UCX_NET_DEVICES syntax, "eth0,mlx5_0:1"): its TCP interfaces
  // listen on these only. Empty: UCX's default (every device). The environment wins.
  std::string net_devices;
  // The port range UCX's TCP interfaces listen in ("18516-18519"); empty: any.
  std::string data_ports;
  size_t max_handshakes = 64;             // peer handshakes at once, in all
  size_t max_handshakes_per_address = 8;  // and from one remote address
  double reconnect_seconds = 0.2;    // pause between attempts to reach a peer that is down
  // Cluster token: each link runs a mutual HMAC-SHA256 challenge-response on it (at the
  // gate) before UCX connects. Empty: peers are not checked (they still run the handshake).
  std::string token;
  // A peer heard from neither by message nor by heartbeat for this long is declared lost
  // (PeerEvent::kDown with a deadline-exceeded status); a handshake that takes longer is
  // abandoned and retried.
  double peer_timeout_seconds = 10;
  double heartbeat_seconds = 1;  // every up peer gets a heartbeat at this interval
  // Messages up to this size go eagerly (UCX's rendezvous threshold), so a slice's data leaves
  // at once instead of after a request-to-send round trip, which on a busy link waits behind
  // the data queued the other way (on 4 nodes at 1 Gbit/s, uncompressed: 8.4 s instead of
  // 9.9 s per VGG-16 sync). 0 keeps UCX's choice; so does UCX_RNDV_THRESH in the environment.
  uint64_t eager_bytes = 0;
  // Called (from progress()) for every refused link: counted by kind; the gate logs it.
  std::function<void(const Refused&)> on_refused;
  // Called when the peer listener cannot accept (out of descriptors); it retries.
  std::function<void(const Status&)> on_accept_failed;
  // The clock of heartbeats, peer and handshake timeouts and reconnect pauses.
  SteadyNow now = steadyNow;
};

Result<std::unique_ptr<Transport>> makeUcxTransport(const UcxOptions& options);

}  // namespace gcagent::transport

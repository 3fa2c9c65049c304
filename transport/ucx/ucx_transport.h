// The transport over UCX (UCP active messages): RDMA where the fabric has it, TCP otherwise.
// The link layer (link_supervisor.h) over the UCX backend (ucx_backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "transport/link_supervisor.h"
#include "transport/transport.h"

namespace gcagent::transport {

// The link layer's options (listen, token, timeouts, ...) and UCX's own. UCX itself never
// listens on `listen`: a link reaches UCX only after the handshake there admitted it.
struct UcxOptions : LinkOptions {
  // UCX's network devices (UCX_NET_DEVICES syntax, "eth0,mlx5_0:1"): its TCP interfaces
  // listen on these only. Empty: UCX's default (every device). The environment wins.
  std::string net_devices;
  // The port range UCX's TCP interfaces listen in ("18516-18519"); empty: any.
  std::string data_ports;
  // Messages up to this size go eagerly (UCX's rendezvous threshold), so a slice's data leaves
  // at once instead of after a request-to-send round trip, which on a busy link waits behind
  // the data queued the other way (on 4 nodes at 1 Gbit/s, uncompressed: 8.4 s instead of
  // 9.9 s per VGG-16 sync). 0 keeps UCX's choice; so does UCX_RNDV_THRESH in the environment.
  uint64_t eager_bytes = 0;
};

Result<std::unique_ptr<Transport>> makeUcxTransport(const UcxOptions& options);

// The version of the UCX library this process loaded ("1.22.0").
std::string ucxVersion();

}  // namespace gcagent::transport

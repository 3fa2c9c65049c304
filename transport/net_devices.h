// Which network devices UCX may use: the one that carries this agent's peer address, so its
// TCP interfaces listen there only (firewalls and Kubernetes NetworkPolicies can then be
// exact), plus the RDMA ports, which no TCP stranger can reach.
#pragma once

#include <string>

#include "common/status.h"

namespace gcagent::transport {

// UCX_NET_DEVICES for an agent reached at `host` (an IP address or a name this machine
// resolves): "eth0", or "eth0,mlx5_0:1" with RDMA ports. Fails if no local device has that
// address.
Result<std::string> netDevicesFor(const std::string& host);

}  // namespace gcagent::transport

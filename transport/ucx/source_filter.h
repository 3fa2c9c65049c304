// UCX's TCP interfaces listen on ports of their own, with no authentication (UCX 1.13 even
// aborted the process on a malformed connection request there; 1.22 does not). The gate keeps
// strangers away from UCX's connection set-up; this keeps them away from those ports: a
// kernel socket filter on each listening socket UCX opened admits packets from the peers'
// addresses only, so a connection from anywhere else never completes. (A process on a peer
// host can still reach them: see the operator guide.)
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace gcagent::transport {

// Descriptors of this process's listening TCP sockets (IPv4 and IPv6).
std::set<int> listeningTcpSockets();

// Admits on listening socket `fd` (and the connections it accepts) only packets whose source
// is one of `hosts` (addresses or names, resolved now). Replaces any earlier filter.
Status admitOnly(int fd, const std::vector<std::string>& hosts);

}  // namespace gcagent::transport

// The loopback backend of the link layer (link_backend.h): links between backends of one
// process through memory, behind the same handshake, heartbeats and reconnection as UCX, so
// the transport conformance suite runs the link layer without a network stack under it. A
// backend that goes away breaks every link to it, as a closed UCX peer does. Backends may
// live on threads of their own.
#pragma once

#include <memory>

#include "common/status.h"
#include "transport/link_backend.h"
#include "transport/link_supervisor.h"

namespace gcagent::transport {

// Where loopback backends find each other: the addresses they hand out name ports in it.
class LoopbackNet;
std::shared_ptr<LoopbackNet> makeLoopbackNet();

std::unique_ptr<LinkBackend> makeLoopbackBackend(std::shared_ptr<LoopbackNet> net);

// The link layer over a loopback backend on `net`; its gate listens on `options.listen`.
Result<std::unique_ptr<Transport>> makeLoopbackTransport(std::shared_ptr<LoopbackNet> net,
                                                         const LinkOptions& options);

}  // namespace gcagent::transport

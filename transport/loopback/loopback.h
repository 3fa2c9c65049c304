// An in-process transport: a group of ranks that exchange messages through memory, for
// tests of everything above the transport. Each rank may live on its own thread.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace gcagent::transport {

std::vector<std::unique_ptr<Transport>> makeLoopbackGroup(Rank size);

}  // namespace gcagent::transport

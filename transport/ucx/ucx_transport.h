// The transport over UCX (UCP active messages): RDMA where the fabric has it, TCP otherwise.
#pragma once

#include <memory>
#include <string>

#include "transport/transport.h"

namespace gcagent::transport {

struct UcxOptions {
  Rank rank = 0;
  Rank size = 1;
  std::string listen = "0.0.0.0:0";  // host:port this rank accepts peers on; port 0: any
  double reconnect_seconds = 0.2;    // pause between attempts to reach a peer that is down
};

Result<std::unique_ptr<Transport>> makeUcxTransport(const UcxOptions& options);

}  // namespace gcagent::transport

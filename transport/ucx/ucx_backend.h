// The UCX backend of the link layer (link_backend.h): one UCP worker; a link is an endpoint
// created by worker address, frames are active messages (eager or rendezvous).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "transport/link_backend.h"

namespace gcagent::transport {

struct UcxBackendOptions {
  Rank rank = 0;  // for log lines
  // UCX's network devices (UCX_NET_DEVICES syntax); empty: UCX's default. The environment wins.
  std::string net_devices;
  // The port range UCX's TCP interfaces listen in ("18516-18519"); empty: any.
  std::string data_ports;
  // UCX's rendezvous threshold; 0 keeps UCX's choice (and so does UCX_RNDV_THRESH).
  uint64_t eager_bytes = 0;
};

Result<std::unique_ptr<LinkBackend>> makeUcxBackend(const UcxBackendOptions& options);

}  // namespace gcagent::transport

// The agent's HTTP endpoint on `metrics.listen` (default 127.0.0.1:9464; port 0 picks a
// free port; an empty address disables it), served from its own thread:
//   /metrics  Prometheus text format, every stat in the registry
//   /healthz  liveness: 200 while the agent runs, with the health JSON
//   /readyz   readiness: 200 when every peer is up and trainers are served, else 503
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "metrics/stats.h"

namespace gcagent::metrics {

class Endpoint {
 public:
  // Serves `stats` until destroyed. A bad or busy address is an error naming it.
  static Result<std::unique_ptr<Endpoint>> start(const std::string& listen, Stats& stats);
  ~Endpoint();

  uint16_t port() const;
  // host:port with the real port.
  std::string address() const;

 private:
  struct Impl;
  explicit Endpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gcagent::metrics

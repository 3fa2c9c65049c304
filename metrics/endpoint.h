// The HTTP endpoint Prometheus scrapes: /metrics on `metrics.listen` (default
// 127.0.0.1:9464; port 0 picks a free port; an empty address disables it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "metrics/stats.h"

namespace prometheus {
class Exposer;
}

namespace gcagent::metrics {

class Endpoint {
 public:
  // Serves `stats` until destroyed. A bad or busy address is an error naming it.
  static Result<std::unique_ptr<Endpoint>> start(const std::string& listen, Stats& stats);
  ~Endpoint();

  uint16_t port() const { return port_; }
  // host:port with the real port.
  std::string address() const;

 private:
  Endpoint(std::unique_ptr<prometheus::Exposer> exposer, std::string host, uint16_t port);
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string host_;
  uint16_t port_;
};

}  // namespace gcagent::metrics

#include "metrics/endpoint.h"

#include <prometheus/exposer.h>

#include <exception>

#include "common/str_cat.h"

namespace gcagent::metrics {

Endpoint::Endpoint(std::unique_ptr<prometheus::Exposer> exposer, std::string host, uint16_t port)
    : exposer_(std::move(exposer)), host_(std::move(host)), port_(port) {}

Endpoint::~Endpoint() = default;

std::string Endpoint::address() const { return strCat(host_, ":", port_); }

Result<std::unique_ptr<Endpoint>> Endpoint::start(const std::string& listen, Stats& stats) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size())
    return Status::invalidArgument(strCat("metrics.listen '", listen, "' is not host:port"));
  // prometheus-cpp (civetweb) reports a bad or busy address by throwing.
  try {
    auto exposer = std::make_unique<prometheus::Exposer>(listen, 2);
    exposer->RegisterCollectable(stats.registry());
    const auto ports = exposer->GetListeningPorts();
    if (ports.empty()) return Status::unavailable(strCat("metrics.listen '", listen, "': not listening"));
    return std::unique_ptr<Endpoint>(new Endpoint(std::move(exposer), listen.substr(0, colon), ports.front()));
  } catch (const std::exception& e) {
    return Status::unavailable(strCat("metrics.listen '", listen, "': ", e.what()));
  }
}

}  // namespace gcagent::metrics

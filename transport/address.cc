#include <netdb.h>

#include <charconv>

#include "common/str_cat.h"
#include "transport/transport.h"

namespace gcagent::transport {

Result<std::pair<std::string, uint16_t>> splitHostPort(std::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == address.size())
    return Status::invalidArgument(strCat("address '", address, "': expected host:port"));
  std::string_view host = address.substr(0, colon), port_text = address.substr(colon + 1);
  if (host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535)
    return Status::invalidArgument(strCat("address '", address, "': port '", port_text, "' is not in [0, 65535]"));
  return std::pair{std::string(host), static_cast<uint16_t>(port)};
}

Status checkResolvable(std::string_view address) {
  GC_ASSIGN_OR_RETURN(auto host_port, splitHostPort(address));
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host_port.first.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc != 0) return Status::unavailable(strCat("address '", address, "': cannot resolve: ", gai_strerror(rc)));
  return {};
}

}  // namespace gcagent::transport

#include "transport/net_devices.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>
#include <filesystem>

#include "common/str_cat.h"

namespace gcagent::transport {
namespace {

bool sameAddress(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr == reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  if (a->sa_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

// "mlx5_0:1"-style names of the RDMA ports, from sysfs (none on a machine without RDMA).
std::string rdmaPorts() {
  std::string out;
  std::error_code ec;
  for (const auto& dev : std::filesystem::directory_iterator("/sys/class/infiniband", ec)) {
    std::error_code port_ec;
    for (const auto& port : std::filesystem::directory_iterator(dev.path() / "ports", port_ec))
      out += strCat(",", dev.path().filename().string(), ":", port.path().filename().string());
  }
  return out;
}

}  // namespace

Result<std::string> netDevicesFor(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
    return Status::notFound(strCat("'", host, "': cannot resolve: ", gai_strerror(rc)));
  ifaddrs* interfaces = nullptr;
  if (::getifaddrs(&interfaces) != 0) {
    ::freeaddrinfo(found);
    return Status::unavailable(strCat("listing network devices: ", std::strerror(errno)));
  }
  std::string device;
  for (addrinfo* a = found; a != nullptr && device.empty(); a = a->ai_next)
    for (ifaddrs* i = interfaces; i != nullptr && device.empty(); i = i->ifa_next)
      if (sameAddress(a->ai_addr, i->ifa_addr)) device = i->ifa_name;
  ::freeifaddrs(interfaces);
  ::freeaddrinfo(found);
  if (device.empty()) return Status::notFound(strCat("no network device of this machine has the address of '", host, "'"));
  return device + rdmaPorts();
}

}  // namespace gcagent::transport

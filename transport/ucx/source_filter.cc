#include "transport/ucx/source_filter.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/filter.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/str_cat.h"

namespace gcagent::transport {
namespace {

using Ipv6 = std::array<uint32_t, 4>;  // host byte order, as BPF loads them

struct Sources {
  std::vector<uint32_t> v4;
  std::vector<Ipv6> v6;
};

Status resolveInto(const std::string& host, Sources& out) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found); rc != 0)
    return Status::unavailable(strCat("'", host, "': cannot resolve: ", gai_strerror(rc)));
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      out.v4.push_back(ntohl(reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr.s_addr));
    } else if (a->ai_family == AF_INET6) {
      const auto& in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr;
      Ipv6 words;
      for (int i = 0; i < 4; ++i) {
        uint32_t w;
        std::memcpy(&w, in6.s6_addr + 4 * i, 4);
        words[i] = ntohl(w);
      }
      out.v6.push_back(words);
    }
  }
  ::freeaddrinfo(found);
  return {};
}

sock_filter stmt(uint16_t code, uint32_t k) { return BPF_STMT(code, k); }
sock_filter jump(uint16_t code, uint32_t k, uint8_t jt, uint8_t jf) { return BPF_JUMP(code, k, jt, jf); }

// The program: by IP version, the source address against each allowed one; a match keeps
// the packet whole, anything else drops it. Offsets are relative to the network header
// (the filter runs with the data at the TCP header).
std::vector<sock_filter> program(const Sources& s) {
  constexpr uint32_t kNet = static_cast<uint32_t>(SKF_NET_OFF);
  constexpr uint32_t kAccept = 0xffffffffu, kDrop = 0;
  std::vector<sock_filter> v4, v6;
  v4.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kNet + 12));
  for (uint32_t a : s.v4) {
    v4.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, a, 0, 1));
    v4.push_back(stmt(BPF_RET | BPF_K, kAccept));
  }
  v4.push_back(stmt(BPF_RET | BPF_K, kDrop));
  for (const Ipv6& a : s.v6) {
    // Four words; a mismatch skips to the next address's block (9 instructions each).
    for (int i = 0; i < 4; ++i) {
      v6.push_back(stmt(BPF_LD | BPF_W | BPF_ABS, kNet + 8 + 4 * static_cast<uint32_t>(i)));
      v6.push_back(jump(BPF_JMP | BPF_JEQ | BPF_K, a[i], 0, static_cast<uint8_t>(7 - 2 * i)));
    }
    v6.push_back(stmt(BPF_RET | BPF_K, kAccept));
  }
  v6.push_back(stmt(BPF_RET | BPF_K, kDrop));
  std::vector<sock_filter> out = {
      stmt(BPF_LD | BPF_B | BPF_ABS, kNet),  // version and header length
      stmt(BPF_ALU | BPF_AND | BPF_K, 0xf0),
      jump(BPF_JMP | BPF_JEQ | BPF_K, 0x40, 1, 0),              // IPv4: on to its block
      stmt(BPF_JMP | BPF_JA, static_cast<uint32_t>(v4.size())),  // else over it (may be > 255)
  };
  out.insert(out.end(), v4.begin(), v4.end());
  out.insert(out.end(), v6.begin(), v6.end());
  return out;
}

}  // namespace

std::set<int> listeningTcpSockets() {
  std::set<int> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return out;
  while (dirent* e = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    int value = 0;
    socklen_t length = sizeof value;
    if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_ACCEPTCONN, &value, &length) != 0 || value == 0) continue;
    int protocol = 0;
    length = sizeof protocol;
    if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_PROTOCOL, &protocol, &length) != 0 || protocol != IPPROTO_TCP)
      continue;
    out.insert(static_cast<int>(fd));
  }
  ::closedir(dir);
  return out;
}

Status admitOnly(int fd, const std::vector<std::string>& hosts) {
  Sources sources;
  for (const std::string& host : hosts) GC_RETURN_IF_ERROR(resolveInto(host, sources));
  std::vector<sock_filter> code = program(sources);
  if (code.size() > BPF_MAXINSNS)
    return Status::resourceExhausted(strCat(hosts.size(), " peer addresses are too many for a socket filter"));
  sock_fprog prog{static_cast<unsigned short>(code.size()), code.data()};
  if (::setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0)
    return Status::unavailable(strCat("attaching a source filter to descriptor ", fd, ": ", std::strerror(errno)));
  return {};
}

}  // namespace gcagent::transport

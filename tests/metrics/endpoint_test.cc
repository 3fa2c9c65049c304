#include "metrics/endpoint.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace gcagent::metrics {
namespace {

// A minimal HTTP GET, enough for the endpoint.
std::string httpGet(uint16_t port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!::write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(Endpoint, ServesTheStatsOnAnEphemeralPort) {
  Stats stats;
  stats.codec("2bit").wire_sent->Increment(123);
  auto endpoint = Endpoint::start("127.0.0.1:0", stats);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().message();
  ASSERT_NE((*endpoint)->port(), 0);
  EXPECT_EQ((*endpoint)->address(), "127.0.0.1:" + std::to_string((*endpoint)->port()));
  const std::string body = httpGet((*endpoint)->port(), "/metrics");
  EXPECT_NE(body.find("gcagent_wire_bytes_total{codec=\"2bit\",direction=\"sent\"} 123"), std::string::npos)
      << body;
  EXPECT_NE(body.find("# TYPE gcagent_encode_seconds histogram"), std::string::npos);
}

TEST(Endpoint, ReadinessFollowsTheHealthRecord) {
  Stats stats;
  auto endpoint = Endpoint::start("127.0.0.1:0", stats);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status().message();
  stats.health().setRank(0, 1);
  std::string reply = httpGet((*endpoint)->port(), "/readyz");
  EXPECT_EQ(reply.rfind("HTTP/1.0 503 Service Unavailable\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("\"peers_connected\":0,\"peers_expected\":1"), std::string::npos) << reply;
  reply = httpGet((*endpoint)->port(), "/healthz");
  EXPECT_EQ(reply.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << reply;
  stats.health().setPeersConnected(1);
  stats.health().setServing(true);
  reply = httpGet((*endpoint)->port(), "/readyz");
  EXPECT_EQ(reply.rfind("HTTP/1.0 200 OK\r\n", 0), 0u) << reply;
  EXPECT_NE(reply.find("{\"status\":\"ready\""), std::string::npos) << reply;
  reply = httpGet((*endpoint)->port(), "/other");
  EXPECT_EQ(reply.rfind("HTTP/1.0 404 Not Found\r\n", 0), 0u) << reply;
}

TEST(Endpoint, ABadOrBusyAddressIsAnErrorNamingIt) {
  Stats stats;
  for (const std::string bad : {"nonsense", "127.0.0.1:", "256.1.2.3:80", "127.0.0.1:99999", "127.0.0.1:9x"}) {
    auto e = Endpoint::start(bad, stats);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find(bad), std::string::npos) << e.status().message();
  }
  auto first = Endpoint::start("127.0.0.1:0", stats);
  ASSERT_TRUE(first.ok());
  const std::string busy = (*first)->address();
  auto second = Endpoint::start(busy, stats);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(busy), std::string::npos) << second.status().message();
}

}  // namespace
}  // namespace gcagent::metrics

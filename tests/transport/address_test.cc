#include <gtest/gtest.h>

#include "transport/transport.h"

namespace gcagent::transport {
namespace {

TEST(AddressTest, SplitsHostAndPort) {
  auto a = splitHostPort("10.0.0.1:18515");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->first, "10.0.0.1");
  EXPECT_EQ(a->second, 18515);
  auto v6 = splitHostPort("[::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->first, "::1");
  EXPECT_EQ(v6->second, 0);
}

TEST(AddressTest, RejectsMalformedAddresses) {
  EXPECT_EQ(splitHostPort("node1").status().message(), "address 'node1': expected host:port");
  EXPECT_EQ(splitHostPort(":80").status().message(), "address ':80': expected host:port");
  EXPECT_EQ(splitHostPort("node1:99999").status().message(), "address 'node1:99999': port '99999' is not in [0, 65535]");
  EXPECT_EQ(splitHostPort("node1:8x").status().message(), "address 'node1:8x': port '8x' is not in [0, 65535]");
}

}  // namespace
}  // namespace gcagent::transport

#include "common/log_throttle.h"

#include <gtest/gtest.h>

namespace gcagent {
namespace {

TEST(LogThrottle, OneLineAnIntervalWithTheCountHeldBack) {
  LogThrottle t(std::chrono::seconds(1));
  const SteadyTime start{std::chrono::seconds(5)};
  uint64_t held = 99;
  EXPECT_TRUE(t.allow(start, &held));
  EXPECT_EQ(held, 0u);
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(t.allow(start + std::chrono::milliseconds(i % 999), &held));
  EXPECT_TRUE(t.allow(start + std::chrono::seconds(1), &held));
  EXPECT_EQ(held, 1000u);
  EXPECT_TRUE(t.allow(start + std::chrono::seconds(3), &held));
  EXPECT_EQ(held, 0u);
}

}  // namespace
}  // namespace gcagent

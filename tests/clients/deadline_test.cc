// The client's deadlines, with the clock read near its epoch (a machine booted a second ago).
#include <gtest/gtest.h>

#include <chrono>

#include "control_channel.h"

namespace gcagent::client {
namespace {

using namespace std::chrono_literals;
using Clock = Deadline::Clock;

const Clock::time_point kBooted = Clock::time_point{} + 1s;

TEST(Deadline, CountsFromNowEvenNearTheClocksEpoch) {
  const Deadline d = Deadline::after(1500, kBooted);
  EXPECT_FALSE(d.infinite());
  EXPECT_FALSE(d.passed(kBooted));
  EXPECT_EQ(d.pollTimeoutMs(kBooted), 1500);
  EXPECT_EQ(d.pollTimeoutMs(kBooted + 1499ms + 500us), 1);  // rounded up, never 0 early
  EXPECT_FALSE(d.passed(kBooted + 1499ms));
  EXPECT_TRUE(d.passed(kBooted + 1500ms));
  EXPECT_EQ(d.pollTimeoutMs(kBooted + 2s), 0);
}

TEST(Deadline, ZeroHasPassedAndNegativeIsNever) {
  EXPECT_TRUE(Deadline::after(0, kBooted).passed(kBooted));
  EXPECT_EQ(Deadline::after(0, kBooted).pollTimeoutMs(kBooted), 0);
  const Deadline never = Deadline::after(-1, kBooted);
  EXPECT_TRUE(never.infinite());
  EXPECT_FALSE(never.passed(kBooted + 10000h));
  EXPECT_EQ(never.pollTimeoutMs(kBooted), -1);
}

TEST(Deadline, LatestOfTwo) {
  const Deadline a = Deadline::after(100, kBooted), b = Deadline::after(300, kBooted);
  EXPECT_EQ(Deadline::latest(a, b).pollTimeoutMs(kBooted), 300);
  EXPECT_EQ(Deadline::latest(b, a).pollTimeoutMs(kBooted), 300);
  EXPECT_TRUE(Deadline::latest(a, Deadline::never()).infinite());
}

}  // namespace
}  // namespace gcagent::client

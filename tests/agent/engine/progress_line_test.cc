// The progress line, with the clock read one second after its epoch (a machine that just
// booted).
#include "agent/engine/progress_line.h"

#include <gtest/gtest.h>

namespace gcagent::agent {
namespace {

using namespace std::chrono_literals;

const SteadyTime kBooted = SteadyTime{} + 1s;

TEST(ProgressLine, RatesCoverTheIntervalSinceThePreviousLine) {
  ProgressLine line({0, 0, 0}, kBooted);
  auto first = line.next({20, 8e6, 1e6}, kBooted + 2s);
  ASSERT_TRUE(first);
  EXPECT_EQ(*first, "progress: 10 iterations/s, 4 MB/s raw, 0.5 MB/s on the wire, ratio 8");
  auto second = line.next({30, 12e6, 2e6}, kBooted + 4s);
  ASSERT_TRUE(second);
  EXPECT_EQ(*second, "progress: 5 iterations/s, 2 MB/s raw, 0.5 MB/s on the wire, ratio 4");
}

TEST(ProgressLine, AnIdleAgentSaysSoOnceThenStaysQuietUntilWorkResumes) {
  ProgressLine line({5, 100, 10}, kBooted);
  auto idle = line.next({5, 100, 10}, kBooted + 10s);
  ASSERT_TRUE(idle);
  EXPECT_EQ(*idle, "progress: idle (nothing reduced since the last line)");
  EXPECT_FALSE(line.next({5, 100, 10}, kBooted + 20s));
  EXPECT_FALSE(line.next({5, 100, 10}, kBooted + 30s));
  auto resumed = line.next({15, 100 + 4e6, 10 + 4e6}, kBooted + 40s);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(*resumed, "progress: 1 iterations/s, 0.4 MB/s raw, 0.4 MB/s on the wire, ratio 1");
  EXPECT_TRUE(line.next({15, 100 + 4e6, 10 + 4e6}, kBooted + 50s));  // idle again: said once more
}

}  // namespace
}  // namespace gcagent::agent

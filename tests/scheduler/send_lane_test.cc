#include "scheduler/send_lane.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/clock.h"

namespace gcagent::scheduler {
namespace {

using std::chrono::milliseconds;
// One second after the clock's epoch, as on a machine that just booted.
const SteadyTime t0 = SteadyTime{} + std::chrono::seconds(1);

TEST(SendLaneTest, HigherPriorityOvertakesWhatStillWaitsButNotWhatLeft) {
  SendLane<std::string> lane(1, 0);
  lane.push(0, "layer9-a");
  lane.push(0, "layer9-b");
  ASSERT_TRUE(lane.admits(100));
  EXPECT_EQ(lane.pop(), "layer9-a");
  lane.take(100);
  EXPECT_FALSE(lane.admits(100));  // one slice in flight: the window is full
  lane.push(5, "layer0");          // the backward pass reached the first layer
  EXPECT_EQ(*lane.next(), "layer0");
  EXPECT_EQ(lane.queued(), 2u);
  lane.complete(100, t0, t0 + milliseconds(1), true);
  ASSERT_TRUE(lane.admits(100));
  EXPECT_EQ(lane.pop(), "layer0");
  EXPECT_EQ(lane.pop(), "layer9-b");
  EXPECT_EQ(lane.next(), nullptr);
}

TEST(SendLaneTest, ARefundedHandOverGivesTheCreditBack) {
  SendLane<int> lane(1, 0);
  lane.push(0, 1);
  (void)lane.pop();
  lane.take(10);
  EXPECT_FALSE(lane.admits(10));
  lane.refund(10);
  EXPECT_TRUE(lane.admits(10));
  EXPECT_EQ(lane.inflightSlices(), 0u);
}

// The link's time per message: a send that waited behind the previous one is timed from that
// one's completion, not from its own hand-over; a failed send is not timed but still ends.
TEST(SendLaneTest, LinkTimeCountsFromTheLaterOfHandOverAndThePreviousCompletion) {
  SendLane<int> lane(4, 0);
  for (int i = 0; i < 3; ++i) lane.take(1);
  auto first = lane.complete(1, t0, t0 + milliseconds(10), true);  // handed at 0, done at 10
  ASSERT_TRUE(first);
  EXPECT_NEAR(*first, 0.010, 1e-9);
  auto second = lane.complete(1, t0, t0 + milliseconds(15), true);  // also handed at 0: waited behind
  ASSERT_TRUE(second);
  EXPECT_NEAR(*second, 0.005, 1e-9);
  EXPECT_FALSE(lane.complete(1, t0 + milliseconds(20), t0 + milliseconds(30), false));
  auto fourth_lane = lane.complete(0, t0 + milliseconds(40), t0 + milliseconds(41), true);  // handed after
  ASSERT_TRUE(fourth_lane);
  EXPECT_NEAR(*fourth_lane, 0.001, 1e-9);
}

}  // namespace
}  // namespace gcagent::scheduler

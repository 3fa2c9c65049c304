#include "scheduler/priority_queue.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gcagent::scheduler {
namespace {

std::vector<std::string> drain(PriorityQueue<std::string>& q) {
  std::vector<std::string> out;
  while (auto item = q.pop()) out.push_back(*item);
  return out;
}

TEST(PriorityQueue, HigherPriorityFirst) {
  PriorityQueue<std::string> q;
  q.push(-3, "layer3");
  q.push(0, "layer0");
  q.push(-1, "layer1");
  EXPECT_EQ(drain(q), (std::vector<std::string>{"layer0", "layer1", "layer3"}));
}

TEST(PriorityQueue, FifoAmongEqualPriorities) {
  PriorityQueue<std::string> q;
  for (int i = 0; i < 50; ++i) q.push(7, std::to_string(i));
  std::vector<std::string> want;
  for (int i = 0; i < 50; ++i) want.push_back(std::to_string(i));
  EXPECT_EQ(drain(q), want);
}

TEST(PriorityQueue, BackwardPassOrderComesOutFrontLayersFirst) {
  // The backward pass hands over the last layer first, each layer in several slices; the
  // queue must give layer 0's slices first, each layer's slices in their order.
  PriorityQueue<std::string> q;
  for (int layer = 4; layer >= 0; --layer)
    for (int s = 0; s < 3; ++s) q.push(-layer, "L" + std::to_string(layer) + "s" + std::to_string(s));
  std::vector<std::string> want;
  for (int layer = 0; layer <= 4; ++layer)
    for (int s = 0; s < 3; ++s) want.push_back("L" + std::to_string(layer) + "s" + std::to_string(s));
  EXPECT_EQ(drain(q), want);
}

TEST(PriorityQueue, LatePushOvertakesQueuedLowerPriorities) {
  PriorityQueue<std::string> q;
  q.push(-5, "a");
  q.push(-5, "b");
  EXPECT_EQ(*q.pop(), "a");
  q.push(0, "urgent");
  q.push(-5, "c");
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(*q.top(), "urgent");
  EXPECT_EQ(q.topPriority(), 0);
  EXPECT_EQ(drain(q), (std::vector<std::string>{"urgent", "b", "c"}));
  EXPECT_TRUE(q.empty());
  EXPECT_FALSE(q.pop().has_value());
  EXPECT_EQ(q.top(), nullptr);
}

TEST(PriorityQueue, OrderIsAFunctionOfThePushesOnly) {
  auto run = [] {
    PriorityQueue<std::string> q;
    uint32_t x = 12345;
    for (int i = 0; i < 1000; ++i) {
      x = x * 1103515245u + 12345u;
      q.push(static_cast<int32_t>(x >> 28) - 8, std::to_string(i));
    }
    return drain(q);
  };
  const auto first = run();
  EXPECT_EQ(first, run());
  EXPECT_EQ(first.size(), 1000u);
}

TEST(PriorityQueue, ExtremePrioritiesOrderCorrectly) {
  PriorityQueue<std::string> q;
  q.push(INT32_MIN, "min");
  q.push(INT32_MAX, "max");
  q.push(0, "zero");
  EXPECT_EQ(drain(q), (std::vector<std::string>{"max", "zero", "min"}));
}

}  // namespace
}  // namespace gcagent::scheduler

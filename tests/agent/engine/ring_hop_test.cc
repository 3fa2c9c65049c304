// The ring of a slice, written out by hand for small rings (expected values independent of
// ringHopOf), and the round trips every ring size must make.
#include "agent/engine/ring_hop.h"

#include <gtest/gtest.h>

#include <vector>

namespace gcagent::agent {
namespace {

TEST(RingHop, FourNodesOwnerTwo) {
  const std::vector<uint32_t> m = {0, 1, 2, 3};
  // Partial sum: 3 starts -> 0 -> 1 -> 2 completes; result: 2 -> 3 -> 0 -> 1.
  const RingHop three = ringHopOf(m, 2, 3), zero = ringHopOf(m, 2, 0), one = ringHopOf(m, 2, 1),
                two = ringHopOf(m, 2, 2);
  EXPECT_TRUE(three.starts);
  EXPECT_FALSE(zero.starts || one.starts || two.starts);
  EXPECT_TRUE(two.owns);
  EXPECT_FALSE(three.owns || zero.owns || one.owns);
  EXPECT_EQ(three.successor, 0u);
  EXPECT_EQ(three.predecessor, 2u);
  EXPECT_EQ(two.successor, 3u);
  EXPECT_EQ(two.predecessor, 1u);
  EXPECT_TRUE(three.forwards_result);
  EXPECT_TRUE(zero.forwards_result);
  EXPECT_FALSE(one.forwards_result) << "its successor is the owner";
  EXPECT_FALSE(two.forwards_result) << "the owner starts the result's round, it does not forward";
}

TEST(RingHop, MembersAfterAShrinkSkipTheMissingRank) {
  const std::vector<uint32_t> m = {0, 2, 5};
  const RingHop two = ringHopOf(m, 0, 2), five = ringHopOf(m, 0, 5), zero = ringHopOf(m, 0, 0);
  EXPECT_TRUE(two.starts);
  EXPECT_EQ(two.successor, 5u);
  EXPECT_EQ(five.successor, 0u);
  EXPECT_EQ(zero.successor, 2u);
  EXPECT_EQ(five.predecessor, 2u);
  EXPECT_TRUE(zero.owns);
  EXPECT_TRUE(two.forwards_result);
  EXPECT_FALSE(five.forwards_result);
}

TEST(RingHop, TwoNodesAreAParameterServerOfOneHop) {
  const std::vector<uint32_t> m = {0, 1};
  EXPECT_TRUE(ringHopOf(m, 1, 0).starts);
  EXPECT_TRUE(ringHopOf(m, 1, 1).owns);
  EXPECT_FALSE(ringHopOf(m, 1, 0).forwards_result);
  EXPECT_FALSE(ringHopOf(m, 1, 1).forwards_result);
}

TEST(RingHop, OneNodeOwnsAlone) {
  const std::vector<uint32_t> m = {4};
  const RingHop h = ringHopOf(m, 4, 4);
  EXPECT_TRUE(h.owns);
  EXPECT_FALSE(h.starts);
  EXPECT_FALSE(h.forwards_result);
}

TEST(RingHop, EverySliceVisitsEveryNodeOnceEachWay) {
  for (uint32_t n = 2; n <= 8; ++n) {
    std::vector<uint32_t> m;
    for (uint32_t r = 0; r < n; ++r) m.push_back(r * 3 + 1);
    for (uint32_t owner : m) {
      SCOPED_TRACE(testing::Message() << n << " nodes, owner " << owner);
      // Walk the partial sum from its start, then the result from the owner.
      uint32_t at = 0, starts = 0;
      for (uint32_t r : m)
        if (ringHopOf(m, owner, r).starts) at = r, ++starts;
      ASSERT_EQ(starts, 1u);
      std::vector<uint32_t> summed = {at};
      while (!ringHopOf(m, owner, at).owns) {
        const uint32_t next = ringHopOf(m, owner, at).successor;
        EXPECT_EQ(ringHopOf(m, owner, next).predecessor, at);
        summed.push_back(at = next);
      }
      EXPECT_EQ(summed.size(), n) << "every node adds its share once";
      uint32_t hops = 1;  // the owner's send
      at = ringHopOf(m, owner, owner).successor;
      while (ringHopOf(m, owner, at).forwards_result) at = ringHopOf(m, owner, at).successor, ++hops;
      EXPECT_EQ(hops, n - 1) << "the result reaches every other node once";
      EXPECT_EQ(ringHopOf(m, owner, at).successor, owner);
    }
  }
}

}  // namespace
}  // namespace gcagent::agent

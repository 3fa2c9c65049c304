// Where a slice's traffic goes under each topology, written out by hand for small cases.
#include "agent/engine/slice_flow.h"

#include <gtest/gtest.h>

#include <vector>

namespace gcagent::agent {
namespace {

using Ranks = std::vector<uint32_t>;
const Ranks kFour = {0, 1, 2, 3};

TEST(SliceFlow, ParameterServer) {
  const SliceFlow sender = sliceFlowOf(Topology::kPs, false, kFour, 2, 0);
  EXPECT_EQ(sender.share_to, Ranks{2});
  EXPECT_FALSE(sender.share_merged_here);
  const SliceFlow owner = sliceFlowOf(Topology::kPs, false, kFour, 2, 2);
  EXPECT_TRUE(owner.share_to.empty());
  EXPECT_TRUE(owner.share_merged_here && owner.share_exact);
  EXPECT_TRUE(owner.sum.order.empty()) << "every member, rank order";
  EXPECT_TRUE(owner.sum.final);
  EXPECT_EQ(owner.sum_to, (Ranks{0, 1, 3}));
  EXPECT_TRUE(owner.result_forward.empty());
  EXPECT_FALSE(sliceFlowOf(Topology::kPs, true, kFour, 2, 2).share_exact) << "mxnet encodes the owner's share";
}

TEST(SliceFlow, Ring) {
  // Owner 2: 3 starts, 0 and 1 add theirs and pass on, 2 completes; results 2 -> 3 -> 0 -> 1.
  const SliceFlow three = sliceFlowOf(Topology::kRing, false, kFour, 2, 3);
  EXPECT_EQ(three.share_to, Ranks{0});
  EXPECT_FALSE(three.share_merged_here);
  EXPECT_EQ(three.result_forward, Ranks{0});
  const SliceFlow zero = sliceFlowOf(Topology::kRing, false, kFour, 2, 0);
  EXPECT_TRUE(zero.share_to.empty());
  EXPECT_TRUE(zero.share_merged_here && zero.share_exact);
  EXPECT_EQ(zero.sum.order, (Ranks{3, 0})) << "the predecessor's partial, then its own share";
  EXPECT_FALSE(zero.sum.final);
  EXPECT_EQ(zero.sum_to, Ranks{1});
  EXPECT_EQ(zero.result_forward, Ranks{1});
  const SliceFlow one = sliceFlowOf(Topology::kRing, false, kFour, 2, 1);
  EXPECT_TRUE(one.result_forward.empty()) << "its successor is the owner";
  const SliceFlow two = sliceFlowOf(Topology::kRing, false, kFour, 2, 2);
  EXPECT_EQ(two.sum.order, (Ranks{1, 2}));
  EXPECT_TRUE(two.sum.final);
  EXPECT_EQ(two.sum_to, Ranks{3});
}

TEST(SliceFlow, Allgather) {
  const SliceFlow f = sliceFlowOf(Topology::kAllgather, false, kFour, 2, 1);
  EXPECT_EQ(f.share_to, (Ranks{0, 2, 3}));
  EXPECT_TRUE(f.share_merged_here);
  EXPECT_FALSE(f.share_exact) << "every node sums the same decoded shares";
  EXPECT_TRUE(f.sum.order.empty());
  EXPECT_TRUE(f.sum.final);
  EXPECT_TRUE(f.sum_to.empty()) << "no result travels";
  EXPECT_TRUE(f.result_forward.empty());
}

TEST(SliceFlow, AfterAShrinkOnlyMembersTakePart) {
  const Ranks members = {0, 2, 3};
  EXPECT_EQ(sliceFlowOf(Topology::kPs, false, members, 3, 3).sum_to, (Ranks{0, 2}));
  EXPECT_EQ(sliceFlowOf(Topology::kAllgather, false, members, 3, 0).share_to, (Ranks{2, 3}));
  EXPECT_EQ(sliceFlowOf(Topology::kRing, false, members, 3, 0).share_to, Ranks{2}) << "0 starts: after owner 3";
}

TEST(SliceFlow, TopologyTraitsSayWhatATopologyAsksBeyondOneSlice) {
  EXPECT_FALSE(traitsOf(Topology::kPs).shares_outlive_step);
  EXPECT_FALSE(traitsOf(Topology::kPs).hops);
  EXPECT_TRUE(traitsOf(Topology::kRing).hops);
  EXPECT_FALSE(traitsOf(Topology::kRing).shares_outlive_step);
  EXPECT_TRUE(traitsOf(Topology::kAllgather).shares_outlive_step);
  EXPECT_FALSE(traitsOf(Topology::kAllgather).hops);
}

}  // namespace
}  // namespace gcagent::agent

// reduce.* parameters: taken out of the codec's parameters, defaults as documented, every
// bad name or value refused with the choices named.
#include "agent/engine/reduction_policy.h"

#include <gtest/gtest.h>

namespace gcagent::agent {
namespace {

TEST(ReductionPolicy, DefaultsToBidirectionalAverageAndLeavesCodecParametersAlone) {
  compress::Params params = {{"threshold", "0.5"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_TRUE(policy.ok()) << policy.status().message();
  EXPECT_EQ(policy.value(), (ReductionPolicy{Aggregation::kBidirectional, ResultKind::kAverage, {}}));
  EXPECT_EQ(params, (compress::Params{{"threshold", "0.5"}}));
  EXPECT_EQ(describe(policy.value()), "bidirectional, average");
}

TEST(ReductionPolicy, TakesTheReduceEntriesOutOfTheCodecParameters) {
  compress::Params params = {{"reduce.aggregation", "mxnet"}, {"reduce.result", "sum"}, {"threshold", "0.5"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_TRUE(policy.ok()) << policy.status().message();
  EXPECT_EQ(policy.value(), (ReductionPolicy{Aggregation::kMxnet, ResultKind::kSum, {}}));
  EXPECT_EQ(params, (compress::Params{{"threshold", "0.5"}}));
  EXPECT_EQ(describe(policy.value()), "mxnet, sum");
}

TEST(ReductionPolicy, ExplicitDefaultsAreAccepted) {
  compress::Params params = {{"reduce.aggregation", "bidirectional"}, {"reduce.result", "average"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_TRUE(policy.ok()) << policy.status().message();
  EXPECT_EQ(policy.value(), ReductionPolicy{});
  EXPECT_TRUE(params.empty());
}

TEST(ReductionPolicy, AnUnknownAggregationIsRefusedWithTheChoices) {
  compress::Params params = {{"reduce.aggregation", "ring"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().message(), "reduce.aggregation 'ring' is not one of: bidirectional, mxnet");
}

TEST(ReductionPolicy, AnUnknownResultIsRefusedWithTheChoices) {
  compress::Params params = {{"reduce.result", "mean"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().message(), "reduce.result 'mean' is not one of: average, sum");
}

TEST(ReductionPolicy, AnUnknownReduceNameIsRefused) {
  compress::Params params = {{"reduce.order", "rank"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().message(),
            "unknown parameter 'reduce.order' (reduce.* names are reduce.aggregation, reduce.result, reduce.topology, "
            "reduce.contributor and reduce.owner)");
}

TEST(ReductionPolicy, ATensorMayBeReducedToOneNode) {
  compress::Params params = {{"reduce.owner", "2"}, {"threshold", "0.5"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_TRUE(policy.ok());
  EXPECT_EQ(policy->owner, 2u);
  EXPECT_EQ(describe(*policy), "bidirectional, average, to node 2");
  compress::Params bad = {{"reduce.owner", "-1"}};
  EXPECT_EQ(takeReductionPolicy(bad).status().message(), "reduce.owner '-1' is not a node rank (0, 1, ...)");
}

TEST(ReductionPolicy, ATensorMayChooseItsTopology) {
  compress::Params params = {{"reduce.topology", "ring"}, {"threshold", "0.5"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_TRUE(policy.ok()) << policy.status().message();
  ASSERT_TRUE(policy->topology.has_value());
  EXPECT_EQ(*policy->topology, Topology::kRing);
  EXPECT_EQ(describe(policy.value()), "bidirectional, average, ring");
  EXPECT_EQ(params.size(), 1u);
  compress::Params none;
  EXPECT_FALSE(takeReductionPolicy(none)->topology.has_value()) << "unset: the agent's default decides";
}

TEST(ReductionPolicy, AnUnknownTopologyIsRefusedWithTheChoices) {
  compress::Params params = {{"reduce.topology", "tree"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_FALSE(policy.ok());
  EXPECT_EQ(policy.status().message(), "reduce.topology 'tree' is not one of: ps, ring, allgather, auto");
}

TEST(ReductionPolicy, ATensorMayHaveOneContributorPerNode) {
  compress::Params params = {{"reduce.contributor", "1"}, {"threshold", "0.5"}};
  auto policy = takeReductionPolicy(params);
  ASSERT_TRUE(policy.ok()) << policy.status().message();
  EXPECT_EQ(policy->contributor, std::optional<uint32_t>(1));
  EXPECT_EQ(describe(policy.value()), "bidirectional, average, local rank 1 alone");
  EXPECT_EQ(params.size(), 1u);
  compress::Params none;
  EXPECT_FALSE(takeReductionPolicy(none)->contributor.has_value()) << "unset: every local trainer";
  for (const char* bad : {"", "-1", "one", "1.5", "99999999999"}) {
    compress::Params p = {{"reduce.contributor", bad}};
    EXPECT_EQ(takeReductionPolicy(p).status().message(),
              std::string("reduce.contributor '") + bad + "' is not a local rank (0, 1, ...)");
  }
}

}  // namespace
}  // namespace gcagent::agent

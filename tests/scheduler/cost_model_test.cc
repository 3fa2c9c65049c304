#include "scheduler/cost_model.h"

#include <gtest/gtest.h>

namespace gcagent::scheduler {
namespace {

// HiPress's published SeCoPa coefficients (milliseconds; DESIGN.md appendix B).
StepCosts secopa() {
  StepCosts c;
  c.encode = {1.4133e-8, 5.8938e-2, 0.05408};
  c.decode = {6.2041e-9, 1.3956e-1, 0.07287};
  c.gather = {2.7156e-6, 0.41930, 0.15573};
  c.broadcast = {2.7157e-6, 0.22156, 0.14820};
  c.aggregate = {0, 0, 0};
  c.ratio = 1.0 / 16;
  return c;
}

TEST(LinearCost, OverheadBelowThresholdLinearAbove) {
  const LinearCost c{2.0, 1.0, 11.0};  // thr = (11 - 1) / 2 = 5
  EXPECT_DOUBLE_EQ(c.threshold(), 5.0);
  EXPECT_DOUBLE_EQ(c(0), 11.0);
  EXPECT_DOUBLE_EQ(c(4.9), 11.0);
  EXPECT_DOUBLE_EQ(c(5), 11.0);
  EXPECT_DOUBLE_EQ(c(10), 21.0);
}

TEST(LinearCost, ThresholdNeverNegative) {
  const LinearCost c{1.0, 5.0, 2.0};
  EXPECT_DOUBLE_EQ(c.threshold(), 0.0);
  EXPECT_DOUBLE_EQ(c(0), 5.0);
  const LinearCost free{0, 0, 0};
  EXPECT_DOUBLE_EQ(free(1e9), 0.0);
}

TEST(CostModel, HandComputedCosts) {
  // 589824 elements in 4 partitions: gather(147456) = 2.7156e-6*147456 + 0.4193 and so on.
  const StepCosts c = secopa();
  const double part = 589824.0 / 4;
  EXPECT_NEAR(uncompressedCost(c, 589824, 4, 4), 2.7156e-6 * part + 0.41930 + 2.7157e-6 * part + 0.22156, 1e-12);
  // Compressed, K = 2, S = 1179648: part 589824, encoded 36864; min(K+1, N) = 3 encodes and
  // min(N-1+K, 2(N-1)) = 5 decodes; both thresholds are negative, so both are linear.
  const double p2 = 1179648.0 / 2, e2 = p2 / 16;
  const double want = 2.7156e-6 * e2 + 0.41930 + 2.7157e-6 * e2 + 0.22156 + 3 * (1.4133e-8 * p2 + 5.8938e-2) +
                      5 * (6.2041e-9 * e2 + 1.3956e-1);
  EXPECT_NEAR(compressedCost(c, 1179648, 4, 2), want, 1e-12);
}

struct Published {
  double elements;
  bool compress;
  uint32_t partitions;
};

class SecopaPublished : public ::testing::TestWithParam<Published> {};

TEST_P(SecopaPublished, ReproducesHiPressDecision) {
  const Published p = GetParam();
  const Plan plan = planReduction(secopa(), p.elements, 4);
  EXPECT_EQ(plan.compress, p.compress) << plan.describe();
  EXPECT_EQ(plan.partitions, p.partitions) << plan.describe();
}

INSTANTIATE_TEST_SUITE_P(PsTopologyN4, SecopaPublished,
                         ::testing::Values(Published{589824, false, 4}, Published{1179648, true, 2},
                                           Published{2359296, true, 4}, Published{4096000, true, 4},
                                           Published{1728, false, 4}));

TEST(CostModel, PlanCostsAreTheMinimaOverPartitions) {
  const Plan plan = planReduction(secopa(), 1179648, 4);
  double best_raw = 1e300, best_enc = 1e300;
  for (uint32_t k = 1; k <= 4; ++k) {
    best_raw = std::min(best_raw, uncompressedCost(secopa(), 1179648, 4, k));
    best_enc = std::min(best_enc, compressedCost(secopa(), 1179648, 4, k));
  }
  EXPECT_DOUBLE_EQ(plan.uncompressed_cost, best_raw);
  EXPECT_DOUBLE_EQ(plan.compressed_cost, best_enc);
  EXPECT_NEAR(plan.uncompressed_cost, 2.2426155456, 1e-9);
  EXPECT_NEAR(plan.compressed_cost, 1.741844930688, 1e-9);
}

TEST(CostModel, TiesGoToTheFirstPartitionCount) {
  StepCosts c;
  c.gather = c.broadcast = {0, 1, 1};  // every partition count costs the same
  c.encode = c.decode = {0, 5, 5};
  const Plan plan = planReduction(c, 1000, 4);
  EXPECT_FALSE(plan.compress);
  EXPECT_EQ(plan.partitions, 1u);
}

TEST(CostModel, OneNodeSendsNothing) {
  const Plan plan = planReduction(secopa(), 1e8, 1);
  EXPECT_FALSE(plan.compress);
  EXPECT_EQ(plan.partitions, 1u);
}

TEST(CostModel, DescribeNamesTheDecision) {
  const Plan plan = planReduction(secopa(), 1179648, 4);
  EXPECT_EQ(plan.describe().rfind("compressed in 2 partitions (model: compressed 1.74", 0), 0u) << plan.describe();
}

}  // namespace
}  // namespace gcagent::scheduler

#include "scheduler/cost_fit.h"

#include <gtest/gtest.h>

namespace gcagent::scheduler {
namespace {

TEST(CostFit, RecoversAnExactLine) {
  CostFit f(1000, 1.0);
  for (double x : {1000.0, 5000.0, 20000.0, 40000.0, 40000.0}) f.add(x, 3e-9 * x + 2e-5);
  f.add(10, 7e-5);
  f.add(100, 9e-5);
  auto c = f.fit();
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR(c->w, 3e-9, 1e-15);
  EXPECT_NEAR(c->b, 2e-5, 1e-12);
  EXPECT_NEAR(c->overhead, 8e-5, 1e-12);
  EXPECT_NEAR((*c)(10), 8e-5, 1e-12);                  // below thr = (8e-5 - 2e-5) / 3e-9 = 20000
  EXPECT_NEAR((*c)(30000), 3e-9 * 30000 + 2e-5, 1e-12);
}

TEST(CostFit, NeedsTwoSizes) {
  CostFit f(1000, 1.0);
  EXPECT_FALSE(f.fit().has_value());
  for (int i = 0; i < 10; ++i) f.add(40000, 1e-4);
  EXPECT_FALSE(f.fit().has_value());  // one size: no slope
  f.add(10000, 2.5e-5);
  EXPECT_TRUE(f.fit().has_value());
}

TEST(CostFit, NoSmallSamplesMeansOverheadIsIntercept) {
  CostFit f(1000, 1.0);
  f.add(2000, 2e-5 + 2000e-9);
  f.add(8000, 2e-5 + 8000e-9);
  auto c = f.fit();
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR(c->overhead, c->b, 1e-15);
  EXPECT_NEAR(c->threshold(), 0.0, 1e-9);
}

TEST(CostFit, NegativeSlopeFromNoiseIsClamped) {
  CostFit f(1000, 1.0);
  f.add(2000, 4e-5);
  f.add(8000, 1e-5);
  auto c = f.fit();
  ASSERT_TRUE(c.has_value());
  EXPECT_GT(c->w, 0);
  EXPECT_NEAR(c->w, 5e-5 / 10000, 1e-15);
  EXPECT_EQ(c->b, 0);
}

TEST(CostFit, FollowsAChangeOfSpeed) {
  CostFit f(1000, 0.9);
  for (int i = 0; i < 200; ++i) f.add(i % 2 ? 4000 : 40000, (i % 2 ? 4000 : 40000) * 1e-9);
  for (int i = 0; i < 200; ++i) f.add(i % 2 ? 4000 : 40000, (i % 2 ? 4000 : 40000) * 1e-8);
  auto c = f.fit();
  ASSERT_TRUE(c.has_value());
  EXPECT_NEAR(c->w, 1e-8, 1e-10);
}

}  // namespace
}  // namespace gcagent::scheduler

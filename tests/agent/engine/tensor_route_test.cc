#include "agent/engine/tensor_route.h"

#include <gtest/gtest.h>

#include "tests/agent/engine/routes.h"

namespace gcagent::agent {
namespace {

TEST(TensorRouteTest, PolicyAndResultCodecDecideThePullCodec) {
  EXPECT_EQ(routeOf("2bit").pull_spec.name, "2bit");
  EXPECT_EQ(routeOf("2bit", Aggregation::kMxnet).pull_spec.name, "none") << "mxnet sends the sum as is";
  EXPECT_EQ(routeOf("none").pull_spec.name, "none");
  const TensorRoute r = routeOf("fp16");
  EXPECT_EQ(r.slice_count, 3u);
  EXPECT_EQ(r.geometry.size(2), 500u);
  metrics::Stats stats;
  scheduler::Planner planner({});
  TensorSpec bad{9, 10, 0, {"9bit", {}}, {}};
  EXPECT_EQ(makeRoute(bad, {}, planner, stats).status().message().rfind("tensor 9: unknown codec '9bit'", 0), 0u)
      << makeRoute(bad, {}, planner, stats).status().message();
}

TEST(TensorRouteTest, MxnetCompressesEveryKeyWhateverItsSize) {
  metrics::Stats stats;
  scheduler::Planner planner({scheduler::Selection::kSize, /*min_elements=*/1000000, 2, 1000, 5.0});
  TensorRoute bi = makeRoute({1, 2500, 0, {"2bit", {}}, {}}, {}, planner, stats).value();
  TensorRoute mx =
      makeRoute({2, 2500, 0, {"2bit", {}}, {Aggregation::kMxnet, ResultKind::kSum, {}}}, {}, planner, stats).value();
  EXPECT_TRUE(replan(bi, planner, 1000000, false)) << "the first plan is a change";
  EXPECT_TRUE(replan(mx, planner, 1000000, false));
  EXPECT_FALSE(bi.pushCompressed()) << "smaller than min_elements";
  EXPECT_TRUE(mx.pushCompressed());
  EXPECT_FALSE(replan(bi, planner, 1000000, false)) << "nothing changed";
  EXPECT_EQ(mx.divisor(4), 1.0f) << "a sum";
  EXPECT_EQ(bi.divisor(4), 4.0f) << "an average";
}

}  // namespace
}  // namespace gcagent::agent

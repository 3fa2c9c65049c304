// reduce.owner: a tensor reduced to one node. Its owner gets the average, the others send
// their shares and complete without a result; nothing travels back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/agent/engine/engine_runs.h"

namespace gcagent::agent {
namespace {

using ::testing::HasSubstr;

ReductionPolicy toNode(uint32_t owner) {
  ReductionPolicy p;
  p.owner = owner;
  return p;
}

TEST(EngineReduceToOwner, TheOwnerGetsTheAverageAndNoResultTravels) {
  for (const std::string codec : {"none", "2bit"}) {
    Cluster c(3, smallSlices());
    const std::vector<uint64_t> sizes = {2500, 700};
    const compress::Params params = codec == "2bit" ? compress::Params{{"threshold", "0.25"}} : compress::Params{};
    const Seen seen = runPolicy(c, 2, sizes, 3, {codec, params}, toNode(1));
    for (int it = 1; it <= 3; ++it)
      for (size_t k = 0; k < sizes.size(); ++k)
        for (uint64_t i = 0; i < sizes[k]; ++i) {
          double expected = 0;
          for (uint32_t t = 0; t < 6; ++t) expected += valueOf(t, it, 100 + k, i);
          expected /= 6;
          const double own = valueOf(2, it, 100 + k, i) + valueOf(3, it, 100 + k, i);  // node 1's trainers
          for (uint32_t l = 0; l < 2; ++l) {
            const double got = seen[it - 1][1][l][k][i];
            if (codec == "none") {
              ASSERT_NEAR(got, expected, 1e-6) << "iteration " << it << " key " << k << " i " << i;
              continue;
            }
            // 2bit: the owner's own share exact, each other node's quantized once to -t, 0 or
            // +t, and the sum never re-encoded: 6 x result - own share is a multiple of t in [-2t, 2t].
            const double quantized = got * 6 - own;
            ASSERT_NEAR(quantized, 0.25 * std::round(quantized / 0.25), 2e-5) << "iteration " << it << " i " << i;
            ASSERT_LE(std::abs(quantized), 0.5 + 2e-5);
          }
          // The other nodes' buffers keep their own gradients (the second trainer's untouched).
          ASSERT_EQ(seen[it - 1][0][1][k][i], valueOf(1, it, 100 + k, i));
        }
    EXPECT_TRUE(c.results(0).empty() && c.results(1).empty() && c.results(2).empty()) << codec;
    EXPECT_EQ(c.contributions(1).size(), 3u * 2 * (3 + 1)) << codec;  // 2 nodes, 3 iterations, 3 + 1 slices
    EXPECT_EQ(c.sent(0, 2), 0u);
    EXPECT_EQ(c.sent(2, 0), 0u);
    EXPECT_EQ(c.sent(1, 0), 0u) << "the owner sends nothing back";
  }
}

TEST(EngineReduceToOwner, AnOwnerThatIsNoNodeOrAnotherTopologyIsRefused) {
  Cluster c(2, smallSlices());
  const uint64_t job = jobIdOf("to-owner");
  TensorSpec beyond{7, 100, 0, {"none", {}}, toNode(2)};
  EXPECT_THAT(c.engine(0).declareJob(job, {beyond}).status().message(),
              HasSubstr("tensor 7: reduce.owner 2 is not a node (2 nodes)"));
  ReductionPolicy ring = toNode(1);
  ring.topology = Topology::kRing;
  TensorSpec by_ring{7, 100, 0, {"none", {}}, ring};
  EXPECT_THAT(c.engine(0).declareJob(job, {by_ring}).status().message(),
              HasSubstr("reduce.owner reduces to one node, as a parameter server does; it cannot travel by ring"));
}

}  // namespace
}  // namespace gcagent::agent

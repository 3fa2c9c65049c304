// The topology model: cases built so that each topology must win, the rule that keeps a
// compressed tensor off the ring, and auto's choice through the planner, which rests on the
// reference model alone (the same on every node, whatever this node measured).
#include "scheduler/topology_model.h"

#include <gtest/gtest.h>

#include "compress/registry.h"
#include "scheduler/planner.h"

namespace gcagent::scheduler {
namespace {

constexpr double kSlice = 40000;

TEST(TopologyModel, ARingIsCheapestForALargeUncompressedTensor) {
  // 100 M elements on 4 nodes: the same bytes either way, over one flow per link instead of 3.
  const TopologyCosts c = topologyCosts(referenceCosts(), 100e6, kSlice, 4, false, 1.0);
  EXPECT_LT(c.ring, c.ps) << c.describe();
  EXPECT_LT(c.ps, c.allgather) << "allgather sends every byte to every peer";
  EXPECT_EQ(chooseTopology(c, false), Topology::kPs) << "the ring is the operator's choice for a whole job";
  // The penalty per extra peer is what separates them: ring and ps differ by about it.
  EXPECT_NEAR(c.ps / c.ring, 1 + 2 * kFanOutPenalty, 0.01) << c.describe();
}

TEST(TopologyModel, TwoNodesNeedNoRing) {
  // With one peer the ring is the parameter server with a longer path.
  const TopologyCosts c = topologyCosts(referenceCosts(), 100e6, kSlice, 2, false, 1.0);
  EXPECT_NE(chooseTopology(c, false), Topology::kRing) << c.describe();
  EXPECT_LT(c.ps, c.ring) << c.describe();
}

TEST(TopologyModel, ASmallUncompressedTensorTakesTheShortPath) {
  // 4096 elements: latency, not bytes; 2(N-1) hops of a ring lose to two trips.
  const TopologyCosts c = topologyCosts(referenceCosts(), 4096, kSlice, 4, false, 1.0);
  EXPECT_EQ(chooseTopology(c, false), Topology::kPs) << c.describe();
}

TEST(TopologyModel, AnUncompressedTensorIsNeverGathered) {
  // 64 elements: one trip beats two in the model, but raw allgather is not offered.
  const TopologyCosts c = topologyCosts(referenceCosts(), 64, kSlice, 4, false, 1.0);
  EXPECT_EQ(c.cheapest(), Topology::kAllgather) << c.describe();
  EXPECT_EQ(chooseTopology(c, false), Topology::kPs);
}

TEST(TopologyModel, ACompressedDenseTensorStaysWithTheParameterServer) {
  // 2bit (1/16) on 100 M elements: allgather sends N/2 times the bytes; the ring, though no
  // slower in the model, would add a compression error per hop.
  const TopologyCosts c = topologyCosts(referenceCosts(), 100e6, kSlice, 4, true, 1.0 / 16);
  EXPECT_LT(c.ps, c.allgather) << c.describe();
  EXPECT_EQ(chooseTopology(c, true), Topology::kPs);
  TopologyCosts ring_cheapest = c;
  ring_cheapest.ring = 0;
  EXPECT_EQ(chooseTopology(ring_cheapest, true), Topology::kPs) << "never the ring per tensor";
  EXPECT_EQ(chooseTopology(ring_cheapest, false), Topology::kPs);
}

TEST(TopologyModel, ASmallSparseTensorIsGatheredByEveryNode) {
  // One slice of 4096 elements at 0.2 % (dgc): the bytes are nothing; the parameter server's
  // second trip (the owner's encode and the results' link) is what costs.
  const TopologyCosts c = topologyCosts(referenceCosts(), 4096, kSlice, 4, true, 0.002);
  EXPECT_LT(c.allgather, c.ps) << c.describe();
  EXPECT_EQ(chooseTopology(c, true), Topology::kAllgather);
}

TEST(TopologyModel, ALargeSparseTensorStaysWithTheParameterServer) {
  // 100 M elements at 0.2 %: every node summing every slice densely costs more than the
  // owners' share of that work (VGG-16 dgc at 1 Gbit/s measured 0.82 s ps, 1.52 s allgather).
  const TopologyCosts c = topologyCosts(referenceCosts(), 100e6, kSlice, 4, true, 0.002);
  EXPECT_EQ(chooseTopology(c, true), Topology::kPs) << c.describe();
}

TEST(TopologyModel, OneNodeCostsNothing) {
  const TopologyCosts c = topologyCosts(referenceCosts(), 1e6, kSlice, 1, true, 0.1);
  EXPECT_EQ(c.ps, 0);
  EXPECT_EQ(c.cheapest(), Topology::kPs);
}

TEST(TopologyModel, NamesParseBackAndAnUnknownOneIsRefused) {
  for (Topology t : {Topology::kPs, Topology::kRing, Topology::kAllgather, Topology::kAuto})
    EXPECT_EQ(parseTopology(topologyName(t)).value(), t);
  EXPECT_EQ(parseTopology("tree").status().message(), "topology 'tree' is not one of: ps, ring, allgather, auto");
}

TEST(TopologyModel, ThePlannersChoiceIgnoresWhatThisNodeMeasured) {
  Planner planner({Selection::kSize, 262144, 4, 40000, 5.0});
  auto none = compress::makeCodec("none").value();
  auto two = compress::makeCodec("2bit").value();
  auto dgc = compress::makeCodec("dgc", {{"ratio", "0.001"}}).value();
  EXPECT_EQ(planner.chooseTopology(100'000'000, *none).first, Topology::kRing);
  EXPECT_EQ(planner.chooseTopology(64, *none).first, Topology::kRing) << "a job without a codec goes round whole";
  Planner two_nodes({Selection::kSize, 262144, 2, 40000, 5.0});
  EXPECT_EQ(two_nodes.chooseTopology(100'000'000, *none).first, Topology::kPs) << "two nodes need no ring";
  EXPECT_EQ(planner.chooseTopology(100'000'000, *two).first, Topology::kPs);
  EXPECT_EQ(planner.chooseTopology(100'000'000, *dgc).first, Topology::kPs);
  EXPECT_EQ(planner.chooseTopology(4096, *dgc).first, Topology::kPs)
      << "below min_elements the tensor travels uncompressed: the uncompressed choice";
  // A node whose codec ran a hundred times slower still chooses as its peers do.
  for (int i = 0; i < 100; ++i) planner.recordEncode("2bit", 40000, 10000, 1.0);
  planner.maybeRefit(Planner::Clock::now());
  EXPECT_EQ(planner.chooseTopology(100'000'000, *two).first, Topology::kPs);
  Planner compressing_all({Selection::kSize, 0, 4, 40000, 5.0});
  EXPECT_EQ(compressing_all.chooseTopology(4096, *dgc).first, Topology::kAllgather);
}

}  // namespace
}  // namespace gcagent::scheduler

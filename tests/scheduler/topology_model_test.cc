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

TEST(TopologyModel, ARingIsCheapestForALargeUncompressedTensorOnASlowLink) {
  // 100 M elements on 4 nodes at 1 Gbit/s: the same bytes either way, over one flow per link
  // instead of 3, and the link bounds both.
  const TopologyCosts c = topologyCosts(referenceCosts(1), 100e6, kSlice, 4, false, 1.0);
  EXPECT_LT(c.ring, c.ps) << c.describe();
  EXPECT_LT(c.ps, c.allgather) << "allgather sends every byte to every peer";
  EXPECT_EQ(chooseTopology(c, false), Topology::kPs) << "the ring is chosen for a whole job, not per tensor";
  // The penalty per extra peer is what separates them: ring and ps differ by about it.
  EXPECT_NEAR(c.ps / c.ring, 1 + 2 * kFanOutPenalty, 0.01) << c.describe();
  EXPECT_EQ(uncompressedJobTopology(referenceCosts(1), kSlice, 4), Topology::kRing);
  EXPECT_EQ(uncompressedJobTopology(referenceCosts(1), kSlice, 8), Topology::kRing);
}

TEST(TopologyModel, AFastLinkLeavesAnUncompressedJobWithTheParameterServer) {
  // At 10 Gbit/s the node's copies, adds and network stack outlast its time on the wire: ring
  // and ps do the same work, and the ring's path is 2(N-1) hops deep.
  const StepCosts fast = referenceCosts(10);
  const TopologyCosts c = topologyCosts(fast, 100e6, kSlice, 4, false, 1.0);
  EXPECT_LT(c.ps, c.ring) << c.describe();
  EXPECT_EQ(uncompressedJobTopology(fast, kSlice, 4), Topology::kPs);
  EXPECT_EQ(uncompressedJobTopology(fast, kSlice, 8), Topology::kPs);
  // Where the switch lies: the link's time per element against the node's work per element.
  // With 3 peers (3 elements of wire per 4 of work per element moved, 2 ways) the crossover
  // is between 5 and 8 Gbit/s with the reference coefficients.
  EXPECT_EQ(uncompressedJobTopology(referenceCosts(5), kSlice, 4), Topology::kRing);
  EXPECT_EQ(uncompressedJobTopology(referenceCosts(8), kSlice, 4), Topology::kPs);
}

TEST(TopologyModel, TheNetworkStackIsPricedPerByteMoved) {
  // One 40000-element slice on 4 nodes, uncompressed, at a link so fast the wire is nothing:
  // ps's bound is its work, 2 * 2(N-1)/N of the slice through the stack plus the copies and
  // adds; so the stack's part is the difference between two slices' cost and one's.
  const StepCosts c = referenceCosts(1e5);
  const double one = topologyCosts(c, kSlice, kSlice, 4, false, 1.0).ps;
  const double two = topologyCosts(c, 2 * kSlice, kSlice, 4, false, 1.0).ps;
  const double copies_and_adds = (0.75 * 2 + 2) * c.aggregate(kSlice);
  EXPECT_NEAR(two - one, copies_and_adds + 2 * 2 * 0.75 * kSlice * kStackCpuPerElement, 1e-9);
}

TEST(TopologyModel, TwoNodesNeedNoRing) {
  // With one peer the ring is the parameter server with a longer path.
  const TopologyCosts c = topologyCosts(referenceCosts(), 100e6, kSlice, 2, false, 1.0);
  EXPECT_NE(chooseTopology(c, false), Topology::kRing) << c.describe();
  EXPECT_LT(c.ps, c.ring) << c.describe();
  EXPECT_EQ(uncompressedJobTopology(referenceCosts(), kSlice, 2), Topology::kPs);
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

TEST(TopologyModel, ThePlannerPricesTheConfiguredLinkSpeed) {
  auto none = compress::makeCodec("none").value();
  auto two = compress::makeCodec("2bit").value();
  Planner slow({Selection::kSize, 262144, 4, 40000, 5.0, 1.0});
  Planner fast({Selection::kSize, 262144, 4, 40000, 5.0, 10.0});
  EXPECT_EQ(slow.chooseTopology(100'000'000, *none).first, Topology::kRing);
  EXPECT_EQ(fast.chooseTopology(100'000'000, *none).first, Topology::kPs);
  EXPECT_EQ(fast.chooseTopology(64, *none).first, Topology::kPs) << "the whole job, whatever the tensor's size";
  EXPECT_EQ(fast.chooseTopology(100'000'000, *two).first, Topology::kPs);
  EXPECT_LT(fast.chooseTopology(100'000'000, *none).second.ps, slow.chooseTopology(100'000'000, *none).second.ps);
}

}  // namespace
}  // namespace gcagent::scheduler

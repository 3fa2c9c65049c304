// Partitions under transport.on_peer_loss = shrink, across four engines: every result any
// node hands its trainers is checked against the mean of exactly the nodes of the view it
// completed under, and that view against the majority's. A 2 | 2 partition stops both
// halves, 3 | 1 lets the three go on, a partition in the middle of a membership change
// installs nothing, and under transport.quorum = none both halves go on and the one that
// loses at the heal is taken in anew (its trainers told to load the winner's weights).
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "agent/engine/reduction_engine.h"
#include "tests/agent/engine/engine_cluster.h"
#include "tests/common/epoch_clock.h"

namespace gcagent::agent {
namespace {

constexpr uint64_t kKeys[] = {10, 11};
constexpr uint64_t kElements = 3000;
constexpr uint32_t kNodes = 4;

float gradient(uint32_t r, uint64_t k) { return static_cast<float>(100 * (r + 1) + k); }

class Partition : public ::testing::TestWithParam<Topology> {
 protected:
  explicit Partition(Quorum quorum = Quorum::kMajority) : c_(kNodes, options(quorum)) {
    for (uint32_t r = 0; r < kNodes; ++r) {
      EXPECT_TRUE(c_.engine(r).declareJob(job_, {{10, kElements, 0, {}, {}}, {11, kElements, -1, {}, {}}}).ok());
      for (uint32_t p = 0; p < kNodes; ++p)
        if (p != r) c_.engine(r).onPeerUp(p);
    }
  }

  EngineOptions options(Quorum quorum) {
    EngineOptions o;
    o.slice_elements = 1000;
    o.on_peer_loss = OnPeerLoss::kShrink;
    o.shrink_grace = 10;
    o.quorum = quorum;
    o.now = clock_.now();
    o.topology = GetParam();
    return o;
  }

  void link(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, bool up) {
    for (uint32_t x : a)
      for (uint32_t y : b) {
        c_.cut(x, y, !up);
        if (up) {
          c_.engine(x).onPeerUp(y);
          c_.engine(y).onPeerUp(x);
        } else {
          c_.engine(x).onPeerDown(y, Status::deadlineExceeded("nothing heard"));
          c_.engine(y).onPeerDown(x, Status::deadlineExceeded("nothing heard"));
        }
      }
    c_.pump();
  }

  void review() {
    for (uint32_t r = 0; r < kNodes; ++r) c_.engine(r).tick();
    c_.pump();
  }

  // One step on `nodes`. Every key that completes must hold the mean over the members of
  // the view its node is at (counted in wrong_); returns the nodes whose every key completed,
  // and keeps the first failure of each node. A node whose step is still in flight (it waits
  // for a peer's) submits nothing: its trainers wait for it, as real ones do.
  std::set<uint32_t> step(const std::vector<uint32_t>& nodes) {
    for (uint32_t r : nodes) {
      if (in_flight_[r] > 0) continue;
      ++iteration_[r];
      auto& buffers = steps_[{r, iteration_[r]}];  // kept: the cluster may write them to its end
      for (uint64_t k : kKeys) buffers.emplace_back(kElements, gradient(r, k));
      for (size_t i = 0; i < std::size(kKeys); ++i) {
        if (Status s = c_.engine(r).reduce(job_, iteration_[r], kKeys[i], {buffers[i].data()}); !s.ok())
          failure_[r] = s.message();
        else
          ++in_flight_[r];
      }
    }
    c_.pump();
    std::set<uint32_t> complete;
    for (uint32_t r : nodes) {
      size_t ok = 0;
      const MembershipView& v = c_.engine(r).membership().view();
      for (const Done& d : std::exchange(c_.done(r), {})) {
        --in_flight_[r];
        if (!d.status.ok()) {
          failure_[r] = d.status.message();
          continue;
        }
        ++ok;
        const size_t i = d.key == kKeys[0] ? 0 : 1;
        float sum = 0;
        for (uint32_t m : v.members) sum += gradient(m, d.key);
        const float want = sum / static_cast<float>(v.members.size());
        for (float x : steps_.at({r, d.iteration})[i]) wrong_ += x != want;
      }
      if (ok == std::size(kKeys)) complete.insert(r);
    }
    return complete;
  }

  // Steps until `nodes` all complete one (at most `tries`); the nodes that completed last.
  std::set<uint32_t> stepUntil(const std::vector<uint32_t>& nodes, int tries = 4) {
    std::set<uint32_t> done;
    for (int t = 0; t < tries; ++t) {
      done = step(nodes);
      if (done.size() == nodes.size()) break;
    }
    return done;
  }

  std::set<uint32_t> all(const std::vector<uint32_t>& nodes) { return {nodes.begin(), nodes.end()}; }

  testing::EpochClock clock_{std::chrono::seconds(100)};
  const uint64_t job_ = jobIdOf("partition");
  // Every step's buffers by key, by node and trainer iteration; before the cluster, which may
  // write them to its end.
  std::map<std::pair<uint32_t, uint64_t>, std::vector<std::vector<float>>> steps_;
  Cluster c_;
  std::vector<uint64_t> iteration_ = std::vector<uint64_t>(kNodes, 0);
  std::vector<std::string> failure_ = std::vector<std::string>(kNodes);
  size_t wrong_ = 0;
  std::vector<int> in_flight_ = std::vector<int>(kNodes, 0);  // keys submitted and not reported yet
};

TEST_P(Partition, TwoTwoStopsBothHalvesAndTheHealedClusterGoesOnWhole) {
  ASSERT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  link({0, 1}, {2, 3}, false);
  clock_.jump(std::chrono::seconds(30));
  review();
  for (int t = 0; t < 3; ++t) EXPECT_TRUE(step({0, 1, 2, 3}).empty());
  for (uint32_t r = 0; r < kNodes; ++r) {
    EXPECT_EQ(c_.engine(r).membership().view().epoch, 0u) << r;
    EXPECT_NE(failure_[r].find("the job has no quorum: this node reaches 2 of the 4 nodes"), std::string::npos)
        << r << ": " << failure_[r];
  }
  link({0, 1}, {2, 3}, true);
  review();
  EXPECT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  EXPECT_EQ(c_.engine(0).membership().view().epoch, 0u);
  EXPECT_EQ(wrong_, 0u);
}

TEST_P(Partition, ThreeOneLetsTheThreeGoOnAndTakesTheOneBackAsAJoiner) {
  ASSERT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  link({0, 1, 2}, {3}, false);
  clock_.jump(std::chrono::seconds(11));
  review();
  for (uint32_t r : {0u, 1u, 2u}) EXPECT_EQ(c_.engine(r).membership().view(), (MembershipView{1, 0, 0, {0, 1, 2}, {}})) << r;
  EXPECT_EQ(stepUntil({0, 1, 2}), all({0, 1, 2}));
  EXPECT_TRUE(step({3}).empty());
  EXPECT_NE(failure_[3].find("the job has no quorum: this node reaches 1 of the 4 nodes"), std::string::npos)
      << failure_[3];
  link({0, 1, 2}, {3}, true);
  review();
  for (uint32_t r = 0; r < kNodes; ++r)
    EXPECT_EQ(c_.engine(r).membership().view(), (MembershipView{2, 0, 0, {0, 1, 2, 3}, {3}})) << r;
  EXPECT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  EXPECT_EQ(wrong_, 0u);
}

TEST_P(Partition, APartitionDuringAMembershipChangeInstallsNothingUntilAMajorityHearsIt) {
  ASSERT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  link({0, 1, 2}, {3}, false);
  clock_.jump(std::chrono::seconds(11));
  c_.engine(0).tick();  // node 0's prepares are on their way...
  link({0, 1}, {2}, false);         // ...when node 2 is cut off from it
  review();
  for (uint32_t r = 0; r < kNodes; ++r) EXPECT_EQ(c_.engine(r).membership().view().epoch, 0u) << r;
  for (int t = 0; t < 2; ++t) EXPECT_TRUE(step({0, 1, 2, 3}).empty());
  EXPECT_NE(failure_[0].find("no quorum: this node reaches 2 of the 4 nodes"), std::string::npos) << failure_[0];
  EXPECT_NE(failure_[2].find("no quorum: this node reaches 1 of the 4 nodes"), std::string::npos) << failure_[2];
  link({0, 1}, {2}, true);
  clock_.jump(steadySeconds(Membership::kRetrySeconds + 1));
  review();
  for (uint32_t r : {0u, 1u, 2u}) EXPECT_EQ(c_.engine(r).membership().view(), (MembershipView{1, 0, 0, {0, 1, 2}, {}})) << r;
  EXPECT_EQ(stepUntil({0, 1, 2}), all({0, 1, 2}));
  link({0, 1, 2}, {3}, true);
  review();
  EXPECT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  EXPECT_EQ(c_.engine(3).membership().view().joined, std::vector<uint32_t>{3});
  EXPECT_EQ(wrong_, 0u);
}

TEST_P(Partition, OneThatHealsWithinTheGracePeriodChangesNothing) {
  ASSERT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  link({0, 1, 2}, {3}, false);
  clock_.jump(std::chrono::seconds(5));
  review();
  EXPECT_TRUE(step({0, 1, 2, 3}).empty());
  EXPECT_NE(failure_[0].find("peer rank 3 is down"), std::string::npos) << failure_[0];
  link({0, 1, 2}, {3}, true);
  clock_.jump(std::chrono::seconds(10));
  review();
  EXPECT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  for (uint32_t r = 0; r < kNodes; ++r) EXPECT_EQ(c_.engine(r).membership().view().epoch, 0u);
  EXPECT_EQ(wrong_, 0u);
}

INSTANTIATE_TEST_SUITE_P(Topologies, Partition, ::testing::Values(Topology::kPs, Topology::kRing),
                         [](const auto& info) { return std::string(topologyName(info.param)); });

class PartitionWithoutQuorum : public Partition {
 protected:
  PartitionWithoutQuorum() : Partition(Quorum::kNone) {}
};

TEST_P(PartitionWithoutQuorum, BothHalvesGoOnAndTheLoserIsTakenInAnew) {
  ASSERT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  link({0, 1}, {2, 3}, false);
  clock_.jump(std::chrono::seconds(11));
  review();
  EXPECT_EQ(c_.engine(0).membership().view(), (MembershipView{1, 0, 0, {0, 1}, {}}));
  EXPECT_EQ(c_.engine(2).membership().view(), (MembershipView{1, 2, 0, {2, 3}, {}}));
  EXPECT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3})) << "each half averages over its own two nodes";
  link({0, 1}, {2, 3}, true);
  EXPECT_TRUE(step({2, 3}).empty()) << "the half that lost waits";
  for (uint32_t r : {2u, 3u})
    EXPECT_NE(failure_[r].find("this node is not in the job's membership, epoch 1 (nodes 0, 1) (this node trained "
                               "under epoch 1 (nodes 2, 3) (proposed by node 2), a membership that lost to epoch 1 "
                               "(nodes 0, 1) (proposed by node 0)"),
              std::string::npos)
        << failure_[r];
  review();
  for (uint32_t r = 0; r < kNodes; ++r)
    EXPECT_EQ(c_.engine(r).membership().view(), (MembershipView{2, 0, 0, {0, 1, 2, 3}, {2, 3}})) << r;
  EXPECT_EQ(stepUntil({0, 1, 2, 3}), all({0, 1, 2, 3}));
  EXPECT_EQ(wrong_, 0u);
}

INSTANTIATE_TEST_SUITE_P(Topologies, PartitionWithoutQuorum, ::testing::Values(Topology::kPs),
                         [](const auto& info) { return std::string(topologyName(info.param)); });

}  // namespace
}  // namespace gcagent::agent

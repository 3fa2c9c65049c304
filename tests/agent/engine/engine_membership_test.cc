// Shrinking and growing (transport.on_peer_loss = shrink) across three engines: a node gone
// past the grace period is left behind, the others' steps average over the two of them, a
// node cut off alone waits (min_nodes), and the node back is taken in at the next membership
// change; slices sent under an older view are stale, not hostile.
#include <gtest/gtest.h>

#include <vector>

#include "agent/engine/reduction_engine.h"
#include "tests/agent/engine/engine_cluster.h"
#include "tests/common/epoch_clock.h"

namespace gcagent::agent {
namespace {

constexpr uint64_t kKeys[] = {10, 11};
constexpr uint64_t kElements = 3000;

// Node r's gradient of key k: only the rank and key, so every mean is known in advance.
float gradient(uint32_t r, uint64_t k) { return static_cast<float>(100 * (r + 1) + k); }

// Every topology shrinks and grows alike: the ring's successors and the allgather's peers
// follow the membership as the parameter server's owners do.
class Membership3 : public ::testing::TestWithParam<Topology> {
 protected:
  Membership3() : c_(3, options()) {
    for (uint32_t r = 0; r < 3; ++r) {
      EXPECT_TRUE(c_.engine(r).declareJob(job_, {{10, kElements, 0, {}, {}}, {11, kElements, -1, {}, {}}}).ok());
      for (uint32_t p = 0; p < 3; ++p)
        if (p != r) c_.engine(r).onPeerUp(p);  // the start: every link comes up once
    }
  }

  EngineOptions options() {
    EngineOptions o;
    o.slice_elements = 1000;  // three slices per key: owners spread over the nodes
    o.on_peer_loss = OnPeerLoss::kShrink;
    o.shrink_grace = 10;
    o.min_nodes = 2;
    o.now = clock_.now();
    o.topology = GetParam();
    return o;
  }

  // One step on `nodes`, each with its own trainer iteration; returns the statuses per node
  // (refusals and reports alike) and leaves the results in buffers_.
  // A node whose step is still in flight (it waits for a peer's) submits nothing: its
  // trainers wait for it, as real ones do.
  std::vector<std::vector<Status>> step(const std::vector<uint32_t>& nodes) {
    std::vector<std::vector<Status>> out(3);
    for (uint32_t r : nodes) {
      if (in_flight_[r] > 0) continue;
      retired_.push_back(std::move(buffers_[r]));  // kept: the cluster may write them to its end
      buffers_[r].clear();
      for (uint64_t k : kKeys) buffers_[r].emplace_back(kElements, gradient(r, k));
      ++iteration_[r];
      for (size_t i = 0; i < std::size(kKeys); ++i) {
        if (Status s = c_.engine(r).reduce(job_, iteration_[r], kKeys[i], {buffers_[r][i].data()}); !s.ok())
          out[r].push_back(s);
        else
          ++in_flight_[r];
      }
    }
    c_.pump();
    for (uint32_t r : nodes)
      for (const Done& d : std::exchange(c_.done(r), {})) {
        --in_flight_[r];
        out[r].push_back(d.status);
      }
    return out;
  }

  // Steps on `nodes` until one completes everywhere (at most `tries`); true then.
  bool stepUntilComplete(const std::vector<uint32_t>& nodes, int tries = 3) {
    for (int t = 0; t < tries; ++t) {
      auto out = step(nodes);
      bool ok = true;
      for (uint32_t r : nodes) {
        ok &= out[r].size() == std::size(kKeys);
        for (const Status& s : out[r]) ok &= s.ok();
      }
      if (ok) return true;
    }
    return false;
  }

  void expectMeanOf(const std::vector<uint32_t>& members, const std::vector<uint32_t>& readers) {
    for (size_t i = 0; i < std::size(kKeys); ++i) {
      float sum = 0;
      for (uint32_t r : members) sum += gradient(r, kKeys[i]);
      const float want = sum / static_cast<float>(members.size());
      for (uint32_t r : readers) {
        EXPECT_FLOAT_EQ(buffers_[r][i][0], want) << "node " << r << " key " << kKeys[i];
        EXPECT_FLOAT_EQ(buffers_[r][i][kElements - 1], want) << "node " << r << " key " << kKeys[i];
      }
    }
  }

  void lose2() {
    c_.cut(0, 2, true);
    c_.cut(1, 2, true);
    for (uint32_t r : {0u, 1u}) c_.engine(r).onPeerDown(2, Status::deadlineExceeded("nothing heard"));
    for (uint32_t r : {0u, 1u}) c_.engine(2).onPeerDown(r, Status::deadlineExceeded("nothing heard"));
  }

  void review() {
    for (uint32_t r = 0; r < 3; ++r) c_.engine(r).tick();
    c_.pump();
  }

  double events(uint32_t r, metrics::Stats::RecoveryEvent e) { return c_.engine(r).stats().recovery(e).Value(); }

  testing::EpochClock clock_{std::chrono::seconds(100)};
  const uint64_t job_ = jobIdOf("membership");
  // Earlier steps' buffers, kept for good; before the cluster, which may write them to its end.
  std::vector<std::vector<std::vector<float>>> retired_;
  Cluster c_;
  std::vector<std::vector<std::vector<float>>> buffers_{3};
  std::vector<uint64_t> iteration_ = std::vector<uint64_t>(3, 0);
  std::vector<int> in_flight_ = std::vector<int>(3, 0);  // keys submitted and not reported yet
};

TEST_P(Membership3, ANodeGonePastTheGraceIsLeftBehindAndTakenBackWhenItReturns) {
  ASSERT_TRUE(stepUntilComplete({0, 1, 2}, 1));
  expectMeanOf({0, 1, 2}, {0, 1, 2});

  lose2();
  auto refused = step({0, 1});
  EXPECT_EQ(refused[0].at(0).message(), "peer rank 2 is down: nothing heard");
  review();
  EXPECT_EQ(c_.engine(0).membership().view().epoch, 0u) << "within the grace period nothing changes";

  clock_.jump(std::chrono::seconds(11));
  review();
  for (uint32_t r : {0u, 1u}) EXPECT_EQ(c_.engine(r).membership().view(), (MembershipView{1, 0, 0, {0, 1}, {}})) << r;
  EXPECT_EQ(c_.engine(2).membership().view().epoch, 0u) << "cut off alone, below min_nodes: it waits";
  EXPECT_EQ(events(0, metrics::Stats::kShrunk), 1);
  EXPECT_EQ(events(1, metrics::Stats::kShrunk), 1);

  // The two go on, averaging over their two nodes' trainers.
  ASSERT_TRUE(stepUntilComplete({0, 1}, 1));
  expectMeanOf({0, 1}, {0, 1});
  auto alone = step({2});
  EXPECT_NE(alone[2].at(0).message().find("the job has no quorum: this node reaches 1 of the 3 nodes"), std::string::npos)
      << alone[2].at(0).message();
  // A node left behind that goes down again fails nothing of the members' steps in flight.
  std::vector<float> a(kElements, gradient(0, 10)), b(kElements, gradient(1, 10));
  ASSERT_TRUE(c_.engine(0).reduce(job_, ++iteration_[0], 10, {a.data()}).ok());
  ASSERT_TRUE(c_.engine(1).reduce(job_, ++iteration_[1], 10, {b.data()}).ok());
  for (uint32_t r : {0u, 1u}) c_.engine(r).onPeerDown(2, Status::unavailable("flapped"));
  c_.pump();
  for (uint32_t r : {0u, 1u}) {
    auto done = std::exchange(c_.done(r), {});
    ASSERT_EQ(done.size(), 1u);
    EXPECT_TRUE(done[0].status.ok()) << done[0].status.toString();
  }
  EXPECT_FLOAT_EQ(a[0], (gradient(0, 10) + gradient(1, 10)) / 2);
  ASSERT_TRUE(stepUntilComplete({0, 1}, 2));  // key 11 skipped a step: the next one realigns

  // Node 2 comes back: it hears the view it is not in, waits, then rank 0 takes it back.
  c_.cut(0, 2, false);
  c_.cut(1, 2, false);
  for (uint32_t r : {0u, 1u}) {
    c_.engine(r).onPeerUp(2);
    c_.engine(2).onPeerUp(r);
  }
  c_.pump();
  EXPECT_EQ(c_.engine(2).membership().view(), (MembershipView{1, 0, 0, {0, 1}, {}}));
  auto outside = step({2});
  EXPECT_EQ(outside[2].at(0).code(), StatusCode::kUnavailable);
  EXPECT_NE(outside[2].at(0).message().find("this node is not in the job's membership, epoch 1 (nodes 0, 1)"),
            std::string::npos) << outside[2].at(0).message();
  review();
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(c_.engine(r).membership().view(), (MembershipView{2, 0, 0, {0, 1, 2}, {2}})) << r;
  EXPECT_EQ(events(0, metrics::Stats::kGrown), 1);
  ASSERT_TRUE(stepUntilComplete({0, 1, 2}));
  expectMeanOf({0, 1, 2}, {0, 1, 2});
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(c_.engine(r).counters().bad_messages, 0u) << r;
}

TEST_P(Membership3, ASliceSentUnderAnOlderViewIsStaleAndItsSenderHearsTheView) {
  lose2();
  clock_.jump(std::chrono::seconds(11));
  review();
  ASSERT_EQ(c_.engine(0).membership().view().epoch, 1u);
  // Node 2's link comes back before it heard anything: its step under epoch 0 reaches nodes
  // at epoch 1, which drop it as stale and tell it the view.
  c_.cut(0, 2, false);
  c_.cut(1, 2, false);
  c_.engine(2).onPeerUp(0);
  c_.engine(2).onPeerUp(1);
  step({2});
  EXPECT_GT(c_.engine(0).counters().stale_slices + c_.engine(1).counters().stale_slices, 0u);
  EXPECT_EQ(c_.engine(0).counters().bad_messages + c_.engine(1).counters().bad_messages, 0u);
  EXPECT_EQ(c_.engine(2).membership().view(), (MembershipView{1, 0, 0, {0, 1}, {}}));
}

INSTANTIATE_TEST_SUITE_P(Topologies, Membership3,
                         ::testing::Values(Topology::kPs, Topology::kRing, Topology::kAllgather),
                         [](const auto& info) { return std::string(topologyName(info.param)); });

TEST(EngineMembership, TheFailPolicyNeverShrinks) {
  testing::EpochClock clock{std::chrono::seconds(100)};
  EngineOptions o;
  o.now = clock.now();
  Cluster c(2, o);
  c.engine(0).onPeerUp(1);
  c.engine(0).onPeerDown(1, Status::unavailable("gone"));
  clock.jump(std::chrono::hours(1));
  c.engine(0).tick();
  EXPECT_EQ(c.engine(0).membership().view(), (MembershipView{0, 0, 0, {0, 1}, {}}));
}

}  // namespace
}  // namespace gcagent::agent

// This node's part in the membership on its own, over loopback: why a reduction cannot start,
// the members away and lost, with their reasons and how long, and the views peers are told.
#include "agent/engine/membership_node.h"

#include <gtest/gtest.h>

#include <map>

#include "agent/wire/peer_frame.h"
#include "common/str_cat.h"
#include "tests/agent/engine/engine_cluster.h"
#include "tests/common/epoch_clock.h"
#include "transport/loopback/loopback.h"

namespace gcagent::agent {
namespace {

class MembershipNodeTest : public ::testing::Test {
 protected:
  MembershipNodeTest() {
    for (auto& t : transport::makeLoopbackGroup(3)) transports_.push_back(std::make_unique<CuttableTransport>(std::move(t)));
    for (uint32_t r = 1; r < 3; ++r)
      transports_[r]->setHandlers(
          [this, r](const transport::Message& m) {
            auto frame = parsePeerFrame(m.header, 3);
            ASSERT_TRUE(frame.ok()) << frame.status().toString();
            heard_[r].push_back(std::get<MembershipNotice>(*frame));
          },
          nullptr);
    for (auto& t : transports_) EXPECT_TRUE(t->connect({}).ok());
    pump();
  }

  std::unique_ptr<MembershipNode> node(OnPeerLoss policy, double reduction_timeout = 60) {
    MembershipNodeOptions o;
    o.on_peer_loss = policy;
    o.shrink_grace = 10;
    o.reduction_timeout = reduction_timeout;
    o.quorum = Quorum::kNone;
    o.now = clock_.now();
    auto n = std::make_unique<MembershipNode>(
        *transports_[0], o, stats_,
        [this](const MembershipView& before, const MembershipView& view, const std::string&) {
          installed_.push_back({before, view});
        });
    for (uint32_t p : {1u, 2u}) n->peerUp(p);  // the start: every link comes up once
    return n;
  }

  void pump() {
    for (int i = 0; i < 20; ++i)
      for (auto& t : transports_) t->progress();
  }

  std::vector<std::unique_ptr<CuttableTransport>> transports_;
  testing::EpochClock clock_{std::chrono::seconds(100)};
  metrics::Stats stats_;
  std::vector<std::pair<MembershipView, MembershipView>> installed_;
  std::map<uint32_t, std::vector<MembershipNotice>> heard_;
};

TEST_F(MembershipNodeTest, AMemberDownStopsReductionsNamingItAndWhyItWent) {
  auto n = node(OnPeerLoss::kFail);
  EXPECT_TRUE(n->unreachable().ok());
  transports_[0]->cut(2, true);
  n->peerDown(2, "nothing heard for 2 s", /*shut_down=*/false);
  EXPECT_EQ(n->unreachable().message(), "peer rank 2 is down: nothing heard for 2 s");
  clock_.jump(std::chrono::seconds(5));
  const auto away = n->away();
  ASSERT_EQ(away.size(), 1u);
  EXPECT_EQ(away[0].rank, 2u);
  EXPECT_GE(away[0].seconds, 5);  // the test clock also moves with real time
  EXPECT_FALSE(away[0].shut_down);
  EXPECT_FALSE(n->lost()) << "within the reduction timeout";
  transports_[0]->cut(2, false);
  n->peerUp(2);
  EXPECT_TRUE(n->unreachable().ok());
  EXPECT_TRUE(n->away().empty());
}

TEST_F(MembershipNodeTest, AMemberAwayPastTheDeadlineIsLostWithTheReasonAndTheSetting) {
  auto n = node(OnPeerLoss::kFail, /*reduction_timeout=*/30);
  n->peerDown(1, "it shut down", /*shut_down=*/true);
  clock_.jump(std::chrono::seconds(31));
  const auto lost = n->lost();
  ASSERT_TRUE(lost);
  EXPECT_EQ(lost->rank, 1u);
  EXPECT_TRUE(lost->shut_down);
  ASSERT_GE(lost->seconds, 31);
  EXPECT_EQ(lost->why, strCat("node 1 has been unreachable for ", static_cast<int64_t>(lost->seconds),
                              " s (it shut down), longer than transport.reduction_timeout (30 s): under "
                              "transport.on_peer_loss = fail the job cannot go on without it"));
  // With no deadline nothing is ever lost.
  auto patient = node(OnPeerLoss::kFail, /*reduction_timeout=*/0);
  patient->peerDown(1, "gone", false);
  clock_.jump(std::chrono::hours(1));
  EXPECT_FALSE(patient->lost());
}

TEST_F(MembershipNodeTest, ALeaderAloneInstallsItsViewAndTellsThePeersThatCanHearIt) {
  auto n = node(OnPeerLoss::kShrink);
  transports_[0]->cut(2, true);
  n->peerDown(2, "nothing heard", false);
  clock_.jump(std::chrono::seconds(11));  // past the grace period
  n->review();
  ASSERT_EQ(installed_.size(), 1u);
  EXPECT_EQ(installed_[0].first.members, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(installed_[0].second.members, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(n->view().epoch, 1u);
  EXPECT_TRUE(n->unreachable().ok()) << "node 2 is no longer needed";
  pump();
  ASSERT_FALSE(heard_[1].empty());
  EXPECT_EQ(heard_[1].back().kind, MembershipNotice::Kind::kInstall);
  EXPECT_EQ(heard_[1].back().view->members, (std::vector<uint32_t>{0, 1}));
  n->tellView(1);  // told already: not again
  pump();
  EXPECT_EQ(heard_[1].size(), 1u);
}

TEST_F(MembershipNodeTest, TheFirstReviewInstallsTheViewThisNodeHadBeforeItRestarted) {
  MembershipNodeOptions o;
  o.on_peer_loss = OnPeerLoss::kShrink;
  o.now = clock_.now();
  const MembershipView had{2, 0, 1, {0, 1}, {}};
  o.votes.kept = VoteRecord{had, {3, 1}, std::nullopt};
  std::vector<std::string> why;
  MembershipNode n(*transports_[0], o, stats_,
                   [&](const MembershipView& before, const MembershipView& view, const std::string& reason) {
                     installed_.push_back({before, view});
                     why.push_back(reason);
                   });
  for (uint32_t p : {1u, 2u}) n.peerUp(p);
  EXPECT_EQ(n.view().epoch, 0u) << "the engine hears of it through the install, as of any view";
  n.review();
  ASSERT_EQ(installed_.size(), 1u);
  EXPECT_EQ(installed_[0].first.epoch, 0u);
  EXPECT_EQ(installed_[0].second, had);
  EXPECT_EQ(why, std::vector<std::string>{"installed here before this agent restarted, kept in agent.state_dir"});
  pump();
  ASSERT_FALSE(heard_[1].empty());
  EXPECT_EQ(heard_[1].front().kind, MembershipNotice::Kind::kInstall) << "and tells the peers";
  EXPECT_EQ(heard_[1].front().view, had);
}

}  // namespace
}  // namespace gcagent::agent

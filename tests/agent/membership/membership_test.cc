// Membership views: who proposes (the lowest member up), what (members gone past the grace
// period out, nodes back in, joiners), how nodes agree (a majority of the installed view
// votes, single-decree Paxos per view) and what a partition does to each part (the notices'
// wire format: peer_frame_test.cc). The agreement runs between Membership objects over a small in-test network
// whose links the tests cut and heal, and whose nodes restart, keeping their votes in a
// VoteStore (vote_store_test.cc) or in memory only.
#include "agent/membership/membership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <deque>
#include <filesystem>
#include <functional>
#include <set>

#include "agent/membership/vote_store.h"
#include "common/str_cat.h"
#include "scheduler/slicing.h"
#include "tests/common/epoch_clock.h"

namespace gcagent::agent {
namespace {

using ::testing::HasSubstr;
using std::chrono::seconds;
using Kind = MembershipNotice::Kind;

MembershipView view(uint32_t epoch, uint32_t proposer, uint32_t parent, std::vector<uint32_t> members,
                    std::vector<uint32_t> joined = {}) {
  return {epoch, proposer, parent, std::move(members), std::move(joined)};
}

class MembershipTest : public ::testing::Test {
 protected:
  ~MembershipTest() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // Node `self` of `world`, every peer seen up once (as at the start).
  Membership make(uint32_t self, uint32_t world = 3, OnPeerLoss policy = OnPeerLoss::kShrink, uint32_t min_nodes = 1,
                  VoteKeeping votes = {}) {
    Membership m(world, self, policy, 10, min_nodes, Quorum::kMajority, std::move(votes));
    for (uint32_t r = 0; r < world; ++r)
      if (r != self) m.peerUp(r);
    return m;
  }
  // Node `self`'s votes as its agent keeps them in agent.state_dir: what it kept before this
  // (re)start, and how it keeps each new vote.
  VoteKeeping stored(uint32_t self, uint32_t world) {
    if (dir_.empty()) {
      std::string pattern = ::testing::TempDir() + "/gcagent-membership-XXXXXX";
      dir_ = ::mkdtemp(pattern.data());
    }
    auto store = VoteStore::open(strCat(dir_, "/node", self), self, world);
    EXPECT_TRUE(store.ok()) << store.status().toString();
    return store.ok() ? store->keeping() : VoteKeeping{};
  }
  testing::EpochClock clock_;
  std::string dir_;
};

TEST_F(MembershipTest, StartsWithEveryNodeAndOwnsAsTheSchedulerDoes) {
  Membership m = make(1);
  EXPECT_EQ(m.view(), view(0, 0, 0, {0, 1, 2}));
  for (uint32_t s = 0; s < 7; ++s) EXPECT_EQ(m.ownerOf(42, s), scheduler::ownerOf(42, s, 3));
}

TEST_F(MembershipTest, TheLeaderProposesWithoutAMemberGonePastTheGracePeriod) {
  Membership m = make(0);
  m.peerDown(2, clock_());
  EXPECT_FALSE(m.propose(clock_()).has_value());  // within the grace period
  clock_.jump(seconds(11));
  auto next = m.propose(clock_());
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, view(1, 0, 0, {0, 1}));
  ASSERT_TRUE(m.install(*next));
  // Owners are now round robin over the two members left.
  for (uint32_t s = 0; s < 7; ++s) EXPECT_EQ(m.ownerOf(42, s), (std::vector<uint32_t>{0, 1})[scheduler::ownerOf(42, s, 2)]);
}

TEST_F(MembershipTest, OnlyTheLowestMemberUpProposes) {
  Membership follower = make(1);
  follower.peerDown(2, clock_());
  clock_.jump(seconds(11));
  EXPECT_FALSE(follower.propose(clock_()).has_value());  // rank 0 is up: it leads
  follower.peerDown(0, clock_());
  clock_.jump(seconds(11));
  auto next = follower.propose(clock_());  // rank 0 is gone too: rank 1 leads
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, view(1, 1, 0, {1}));
}

TEST_F(MembershipTest, FailPolicyNeverProposesAndALateStarterIsNotGone) {
  Membership fail = make(0, 3, OnPeerLoss::kFail);
  fail.peerDown(2, clock_());
  clock_.jump(seconds(60));
  EXPECT_FALSE(fail.propose(clock_()).has_value());
  EXPECT_TRUE(fail.problem().ok()) << "the fail policy keeps its own errors";
  Membership fresh(3, 0, OnPeerLoss::kShrink, 10);  // peers not up yet: late, not gone
  fresh.peerDown(1, clock_());
  clock_.jump(seconds(60));
  EXPECT_FALSE(fresh.propose(clock_()).has_value());
}

TEST_F(MembershipTest, MinNodesKeepsACutOffNodeFromGoingOnAlone) {
  Membership m = make(2, 3, OnPeerLoss::kShrink, 2);
  m.peerDown(0, clock_());
  m.peerDown(1, clock_());
  clock_.jump(seconds(11));
  EXPECT_FALSE(m.propose(clock_()).has_value());
  Membership leader = make(0, 3, OnPeerLoss::kShrink, 2);
  leader.peerDown(2, clock_());
  EXPECT_TRUE(leader.propose(clock_() + seconds(11)).has_value());  // two are left: enough
}

TEST_F(MembershipTest, ANodeBackJoinsUntilAStepCompletesAndAnOutsiderWaits) {
  Membership leader = make(0);
  leader.peerDown(2, clock_());
  ASSERT_TRUE(leader.install(view(1, 0, 0, {0, 1})));
  EXPECT_FALSE(leader.propose(clock_()).has_value());  // rank 2 still down
  leader.peerUp(2);
  auto next = leader.propose(clock_());
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, view(2, 0, 0, {0, 1, 2}, {2}));
  EXPECT_EQ(next->root(), 0u);
  ASSERT_TRUE(leader.install(*next));
  // Node 1 goes away before any step completed: the next view still names 2 a joiner.
  leader.peerDown(1, clock_());
  auto without1 = leader.propose(clock_() + seconds(11));
  ASSERT_TRUE(without1.has_value());
  EXPECT_EQ(*without1, view(3, 0, 0, {0, 2}, {2}));
  leader.stepCompleted();
  EXPECT_EQ(leader.propose(clock_() + seconds(11))->joined, std::vector<uint32_t>{}) << "2 has the weights now";

  Membership outsider = make(2);
  ASSERT_TRUE(outsider.install(view(1, 0, 0, {0, 1})));
  EXPECT_FALSE(outsider.isMember(2));
  EXPECT_FALSE(outsider.takesPart());
  EXPECT_FALSE(outsider.propose(clock_()).has_value());
}

TEST_F(MembershipTest, InstalledViewsFollowInEpochOrder) {
  Membership m = make(1);
  EXPECT_FALSE(m.install(view(0, 0, 0, {0, 1, 2})));  // the same
  EXPECT_TRUE(m.install(view(2, 0, 0, {0, 1})));      // a view may be missed
  EXPECT_FALSE(m.install(view(2, 1, 0, {0, 1, 2})));  // another of the same epoch: never under a majority
  EXPECT_FALSE(m.install(view(1, 0, 0, {0, 1, 2})));  // older
  EXPECT_EQ(m.view(), view(2, 0, 0, {0, 1}));
  EXPECT_EQ(m.view().describe(), "epoch 2 (nodes 0, 1)");
  EXPECT_EQ(view(3, 0, 2, {0}).describe(), "epoch 3 (node 0)");
}

// Nodes whose Membership objects exchange notices over links the test cuts: what the engine
// does with a Reaction (send; install, then tell every node it reaches).
class Net {
 public:
  // `votes`: where node r keeps its votes; none: in memory only.
  Net(uint32_t n, testing::EpochClock& clock, Quorum quorum = Quorum::kMajority,
      std::function<VoteKeeping(uint32_t)> votes = nullptr)
      : clock_(clock), quorum_(quorum), cut_(n) {
    for (uint32_t r = 0; r < n; ++r) {
      nodes_.emplace_back(n, r, OnPeerLoss::kShrink, 10, 1, quorum, votes ? votes(r) : VoteKeeping{});
      cut_[r].assign(n, false);
    }
    for (uint32_t r = 0; r < n; ++r)
      for (uint32_t p = 0; p < n; ++p)
        if (p != r) nodes_[r].peerUp(p);
  }
  Membership& operator[](uint32_t r) { return nodes_[r]; }

  // Cuts (or heals) every link between the two groups; each side hears of it.
  void partition(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b, bool cut = true) {
    for (uint32_t x : a)
      for (uint32_t y : b) {
        cut_[x][y] = cut_[y][x] = cut;
        if (cut) {
          nodes_[x].peerDown(y, clock_());
          nodes_[y].peerDown(x, clock_());
        } else {
          nodes_[x].peerUp(y);
          nodes_[y].peerUp(x);
          tell(x, y);
          tell(y, x);
        }
      }
    drop();
    deliver();
  }
  void heal(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) { partition(a, b, false); }
  // Node r is killed, with the notices to and from it in flight, and starts again with what
  // `votes` kept; every link it has comes up once.
  void restart(uint32_t r, VoteKeeping votes) {
    std::erase_if(queue_, [&](const auto& item) { return std::get<0>(item) == r || std::get<1>(item) == r; });
    const auto n = static_cast<uint32_t>(nodes_.size());
    nodes_[r] = Membership(n, r, OnPeerLoss::kShrink, 10, 1, quorum_, std::move(votes));
    for (uint32_t p = 0; p < n; ++p)
      if (p != r && !cut_[r][p]) nodes_[r].peerUp(p);
  }

  // Every node reviews (first installing the view it had before a restart, as
  // MembershipNode does), then notices flow until none is left.
  void review() {
    for (uint32_t r = 0; r < nodes_.size(); ++r) {
      if (auto resumed = nodes_[r].resumable()) react(r, {{}, *resumed});
      react(r, nodes_[r].review(clock_()));
    }
    deliver();
  }
  void deliver(size_t limit = 100000) {
    while (!queue_.empty() && limit-- > 0) {
      auto [from, to, notice] = queue_.front();
      queue_.pop_front();
      if (cut_[from][to]) continue;
      react(to, nodes_[to].onNotice(from, notice));
    }
  }
  // Delivers only notices of `kind` (others stay queued, in order).
  void deliverOnly(Kind kind) {
    std::deque<std::tuple<uint32_t, uint32_t, MembershipNotice>> rest;
    while (!queue_.empty()) {
      auto item = queue_.front();
      queue_.pop_front();
      if (std::get<2>(item).kind != kind) {
        rest.push_back(item);
        continue;
      }
      if (!cut_[std::get<0>(item)][std::get<1>(item)])
        react(std::get<1>(item), nodes_[std::get<1>(item)].onNotice(std::get<0>(item), std::get<2>(item)));
    }
    for (auto& item : rest) queue_.push_back(item);
  }
  void drop() {
    std::erase_if(queue_, [&](const auto& item) { return cut_[std::get<0>(item)][std::get<1>(item)]; });
  }
  std::vector<MembershipView> views() const {
    std::vector<MembershipView> out;
    for (const Membership& m : nodes_) out.push_back(m.view());
    return out;
  }

 private:
  void react(uint32_t r, Membership::Reaction reaction) {
    for (auto& [to, notice] : reaction.send) queue_.emplace_back(r, to, notice);
    if (reaction.install && nodes_[r].install(*reaction.install)) {
      for (uint32_t p = 0; p < nodes_.size(); ++p)
        if (p != r && !cut_[r][p]) tell(r, p);
      for (auto& [to, notice] : nodes_[r].rejoinNotices()) queue_.emplace_back(r, to, notice);
    }
  }
  void tell(uint32_t from, uint32_t to) {
    if (nodes_[from].view().epoch == 0) return;
    MembershipNotice n{Kind::kInstall, nodes_[from].view().id(), {}, {}, nodes_[from].view()};
    queue_.emplace_back(from, to, n);
  }

  testing::EpochClock& clock_;
  Quorum quorum_;
  std::vector<Membership> nodes_;
  std::vector<std::vector<bool>> cut_;
  std::deque<std::tuple<uint32_t, uint32_t, MembershipNotice>> queue_;
};

TEST_F(MembershipTest, AShrinkIsInstalledOnceAMajorityVotedForIt) {
  Net net(3, clock_);
  net.partition({0, 1}, {2});
  net.review();
  EXPECT_EQ(net[0].view().epoch, 0u) << "within the grace period nothing changes";
  clock_.jump(seconds(11));
  net.review();
  EXPECT_EQ(net[0].view(), view(1, 0, 0, {0, 1}));
  EXPECT_EQ(net[1].view(), view(1, 0, 0, {0, 1}));
  EXPECT_EQ(net[2].view().epoch, 0u);
  EXPECT_TRUE(net[0].problem().ok());
  EXPECT_THAT(net[2].problem().message(),
              HasSubstr("the job has no quorum: this node reaches 1 of the 3 nodes of epoch 0 (nodes 0, 1, 2), no "
                        "majority (2 needed under transport.quorum = majority)"));
  // Back: taken in as a joiner, and every node loads node 0's weights after the next step.
  net.heal({0, 1}, {2});
  EXPECT_EQ(net[2].view(), view(1, 0, 0, {0, 1}));
  net.review();
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(net[r].view(), view(2, 0, 0, {0, 1, 2}, {2})) << r;
}

TEST_F(MembershipTest, ATwoTwoPartitionStopsBothHalvesUntilItHeals) {
  Net net(4, clock_);
  net.partition({0, 1}, {2, 3});
  clock_.jump(seconds(60));
  net.review();
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(net[r].view(), view(0, 0, 0, {0, 1, 2, 3})) << r;
    EXPECT_THAT(net[r].problem().message(), HasSubstr("the job has no quorum: this node reaches 2 of the 4 nodes"));
  }
  net.heal({0, 1}, {2, 3});
  net.review();
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(net[r].view().epoch, 0u) << r;
    EXPECT_TRUE(net[r].problem().ok()) << r;
  }
}

TEST_F(MembershipTest, AThreeOnePartitionLetsTheThreeGoOnAndTakesTheOneBack) {
  Net net(4, clock_);
  net.partition({0, 1, 2}, {3});
  clock_.jump(seconds(11));
  net.review();
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(net[r].view(), view(1, 0, 0, {0, 1, 2})) << r;
  EXPECT_THAT(net[3].problem().message(), HasSubstr("reaches 1 of the 4 nodes"));
  net[0].stepCompleted();
  net.heal({0, 1, 2}, {3});
  net.review();
  for (uint32_t r = 0; r < 4; ++r) EXPECT_EQ(net[r].view(), view(2, 0, 0, {0, 1, 2, 3}, {3})) << r;
}

TEST_F(MembershipTest, ALeaderCutOffBeforeAMajorityAcceptedInstallsNothing) {
  Net net(5, clock_);
  net.partition({0, 1, 2}, {3, 4});
  clock_.jump(seconds(11));
  for (uint32_t r = 0; r < 5; ++r) (void)net[r].review(clock_());  // only the leader starts
  Membership::Reaction start = net[0].review(clock_() + seconds(5));
  ASSERT_EQ(start.send.size(), 2u);  // prepares to 1 and 2
  // Node 2 is cut off before it hears anything: two votes of five are no majority.
  net.partition({0, 1}, {2});
  for (auto& [to, n] : start.send)
    if (to == 1) {
      auto promise = net[1].onNotice(0, n);
      ASSERT_EQ(promise.send.size(), 1u);
      EXPECT_FALSE(net[0].onNotice(1, promise.send[0].notice).install.has_value());
    }
  EXPECT_EQ(net[0].view().epoch, 0u);
}

TEST_F(MembershipTest, AViewAcceptedBeforeIsTheOneAnotherLeaderProposes) {
  // Node 0 gets its view {0, 1, 2} accepted by 0, 1 and 2 (three of five) and installs it,
  // but the install reaches only node 1: node 2 is cut off from 0 and 1 at that moment, and
  // nodes 3 and 4 come back on its side. Node 2 leads there and would propose {2, 3, 4}, a
  // majority of epoch 0 as well: Paxos makes it propose the view it accepted instead, so the
  // two sides install the same epoch 1, and {2, 3, 4} never trains apart.
  Net net(5, clock_);
  net.partition({0, 1, 2}, {3, 4});
  clock_.jump(seconds(11));
  net[0].review(clock_());
  Membership::Reaction prepare = net[0].review(clock_() + seconds(3));
  // Prepare, promise, accept reach everyone; the accepted votes are held back.
  std::vector<std::pair<uint32_t, MembershipNotice>> accepted;
  std::vector<MembershipNotice> accepts;
  for (auto& [to, n] : prepare.send) {
    auto promise = net[to].onNotice(0, n);
    for (auto& [to2, n2] : net[0].onNotice(to, promise.send.at(0).notice).send) accepts.push_back(n2);
  }
  ASSERT_EQ(accepts.size(), 2u);  // to the two it reaches, once both promised
  for (uint32_t to : {1u, 2u}) accepted.emplace_back(to, net[to].onNotice(0, accepts[0]).send.at(0).notice);
  for (const auto& [from, vote] : accepted) {
    auto r = net[0].onNotice(from, vote);
    if (r.install) {
      ASSERT_TRUE(net[0].install(*r.install));
    }
  }
  ASSERT_EQ(net[0].view(), view(1, 0, 0, {0, 1, 2}));
  ASSERT_TRUE(net[1].install(net[0].view()));
  EXPECT_EQ(net[2].view().epoch, 0u) << "node 2 never heard the install";
  net.partition({0, 1}, {2});
  net.heal({2}, {3, 4});
  clock_.jump(seconds(11));
  net.review();
  net.review();
  for (uint32_t r : {2u, 3u, 4u}) EXPECT_EQ(net[r].view(), view(1, 0, 0, {0, 1, 2})) << r;
  EXPECT_THAT(net[2].problem().message(), HasSubstr("the job has no quorum"));
  // {0, 1} holds a majority of epoch 1 and goes on without 2.
  clock_.jump(seconds(11));
  net.review();
  EXPECT_EQ(net[0].view(), view(2, 0, 0, {0, 1}));
}

TEST_F(MembershipTest, QuorumNoneLetsBothHalvesGoOnAndTakesTheLoserInAnew) {
  Net net(4, clock_, Quorum::kNone);
  net.partition({0, 1}, {2, 3});
  clock_.jump(seconds(11));
  net.review();
  EXPECT_EQ(net[0].view(), view(1, 0, 0, {0, 1}));
  EXPECT_EQ(net[2].view(), view(1, 2, 0, {2, 3}));  // one epoch, two views: told apart by proposer
  for (uint32_t r = 0; r < 4; ++r) net[r].stepCompleted();
  net.heal({0, 1}, {2, 3});
  for (uint32_t r : {2u, 3u}) {
    EXPECT_EQ(net[r].view(), view(1, 0, 0, {0, 1})) << "the lower proposer wins a tie";
    EXPECT_FALSE(net[r].takesPart());
    EXPECT_THAT(net[r].trainedApart(), HasSubstr("this node trained under epoch 1 (nodes 2, 3) (proposed by node 2)"));
  }
  EXPECT_EQ(net[0].trainedApart(), "");
  net.review();
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(net[r].view(), view(2, 0, 0, {0, 1, 2, 3}, {2, 3})) << r;
    EXPECT_EQ(net[r].trainedApart(), "") << r;
  }
}

TEST_F(MembershipTest, QuorumNoneAMemberThatTrainedApartAsksToBeTakenInAnew) {
  Membership m(3, 2, OnPeerLoss::kShrink, 10, 1, Quorum::kNone);
  for (uint32_t r : {0u, 1u}) m.peerUp(r);
  ASSERT_TRUE(m.install(view(1, 2, 0, {2})));
  m.stepCompleted();  // trained alone
  ASSERT_TRUE(m.install(view(2, 0, 0, {0, 1, 2})));  // does not follow {2}, and 2 is no joiner
  EXPECT_FALSE(m.takesPart());
  EXPECT_THAT(m.problem().message(),
              HasSubstr("this node trained under epoch 1 (node 2) (proposed by node 2), a membership that lost to "
                        "epoch 2 (nodes 0, 1, 2) (proposed by node 0)"));
  auto rejoin = m.rejoinNotices();
  ASSERT_EQ(rejoin.size(), 2u);
  EXPECT_EQ(rejoin[0].notice.kind, Kind::kRejoin);
  // The leader takes it in anew: the same members, node 2 a joiner.
  Membership leader(3, 0, OnPeerLoss::kShrink, 10, 1, Quorum::kNone);
  for (uint32_t r : {1u, 2u}) leader.peerUp(r);
  ASSERT_TRUE(leader.install(view(2, 0, 0, {0, 1, 2})));
  leader.stepCompleted();
  EXPECT_FALSE(leader.propose(clock_()).has_value());
  (void)leader.onNotice(2, rejoin[0].notice);
  auto anew = leader.review(clock_());
  ASSERT_TRUE(anew.install.has_value());
  EXPECT_EQ(*anew.install, view(3, 0, 0, {0, 1, 2}, {2}));
  ASSERT_TRUE(m.install(*anew.install));
  EXPECT_TRUE(m.takesPart());
  EXPECT_TRUE(m.problem().ok());
}

// Node 0 leads a shrink that leaves out node 2 (cut off from it): node 1 promises and accepts
// {0, 1}, node 0 installs it, and node 1 is killed before the install reaches it. Node 1
// restarts with what `restarted()` read back, node 0 is cut off from everyone before the
// restarted node hears from it, and node 1 leads 2 and itself in the agreement on the same epoch.
void voteInstallAtTheLeaderOnlyThenRestartNode1(Net& net, testing::EpochClock& clock,
                                                const std::function<VoteKeeping()>& restarted) {
  net.partition({0}, {2});
  clock.jump(seconds(11));
  Membership::Reaction prepare = net[0].review(clock());
  ASSERT_EQ(prepare.send.size(), 1u);  // to node 1, the only one it reaches
  auto promise = net[1].onNotice(0, prepare.send[0].notice);
  auto accept = net[0].onNotice(1, promise.send.at(0).notice);
  auto accepted = net[1].onNotice(0, accept.send.at(0).notice);
  auto installed = net[0].onNotice(1, accepted.send.at(0).notice);
  ASSERT_TRUE(installed.install.has_value());
  ASSERT_TRUE(net[0].install(*installed.install));
  ASSERT_EQ(net[0].view(), view(1, 0, 0, {0, 1}));
  net.restart(1, restarted());
  net.partition({0}, {1});
  clock.jump(seconds(11));
  net.review();
}

TEST_F(MembershipTest, ANodeRestartedBetweenItsVoteAndTheInstallProposesTheViewItAccepted) {
  Net net(3, clock_, Quorum::kMajority, [this](uint32_t r) { return stored(r, 3); });
  ASSERT_NO_FATAL_FAILURE(voteInstallAtTheLeaderOnlyThenRestartNode1(net, clock_, [this] { return stored(1, 3); }));
  // Node 1 would propose {1, 2}, a majority of epoch 0 as well; having kept its acceptance of
  // {0, 1}, it must propose that one: one view of epoch 1, whatever each node heard.
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(net[r].view(), view(1, 0, 0, {0, 1})) << r;
}

TEST_F(MembershipTest, VotesInMemoryOnlyLetThatRestartFormTwoViewsOfOneEpoch) {
  // What agent.state_dir prevents (the agent warns at start without it): the same run, node 1
  // restarted without its votes.
  Net net(3, clock_);
  ASSERT_NO_FATAL_FAILURE(voteInstallAtTheLeaderOnlyThenRestartNode1(net, clock_, [] { return VoteKeeping{}; }));
  EXPECT_EQ(net[0].view(), view(1, 0, 0, {0, 1}));
  EXPECT_EQ(net[1].view(), view(1, 1, 0, {1, 2}));
  EXPECT_EQ(net[2].view(), view(1, 1, 0, {1, 2}));
}

TEST_F(MembershipTest, ARestartedNodeRefusesALowerBallotAndReportsTheViewItAccepted) {
  const MembershipView proposed = view(1, 1, 0, {1, 2});
  auto from = [](Kind kind, Ballot ballot, std::optional<MembershipView> v = std::nullopt) {
    return MembershipNotice{kind, ViewId{0, 0}, ballot, {}, std::move(v)};
  };
  {
    Membership before = make(2, 3, OnPeerLoss::kShrink, 1, stored(2, 3));
    auto promise = before.onNotice(1, from(Kind::kPrepare, {5, 1}));
    ASSERT_EQ(promise.send.size(), 1u);
    EXPECT_EQ(promise.send[0].notice.kind, Kind::kPromise);
    auto accepted = before.onNotice(1, from(Kind::kAccept, {5, 1}, proposed));
    ASSERT_EQ(accepted.send.size(), 1u);
    EXPECT_EQ(accepted.send[0].notice.kind, Kind::kAccepted);
  }  // killed before the install
  Membership after = make(2, 3, OnPeerLoss::kShrink, 1, stored(2, 3));
  for (const MembershipNotice& lower :
       {from(Kind::kPrepare, {4, 0}), from(Kind::kAccept, {4, 0}, view(1, 0, 0, {0, 2}))}) {
    auto refused = after.onNotice(0, lower);
    ASSERT_EQ(refused.send.size(), 1u) << noticeKindName(lower.kind);
    EXPECT_EQ(refused.send[0].notice.kind, Kind::kRefuse) << noticeKindName(lower.kind);
    EXPECT_EQ(refused.send[0].notice.ballot, (Ballot{5, 1})) << "names the ballot it promised before the restart";
  }
  auto promise = after.onNotice(0, from(Kind::kPrepare, {6, 0}));
  ASSERT_EQ(promise.send.size(), 1u);
  const MembershipNotice& p = promise.send[0].notice;
  EXPECT_EQ(p.kind, Kind::kPromise);
  EXPECT_EQ(p.accepted, (Ballot{5, 1}));
  EXPECT_EQ(p.view, proposed) << "the view it accepted before the restart, which the new leader must propose";
}

// Votes kept in memory, the way a disk would, or failing as a full one does.
struct Disk {
  std::optional<VoteRecord> record;
  Status failure;
  std::vector<VoteRecord> writes;
  VoteKeeping keeping() {
    return {record, [this](const VoteRecord& r) {
              if (!failure.ok()) return failure;
              writes.push_back(r);
              record = r;
              return Status{};
            }};
  }
};

TEST_F(MembershipTest, AVoteThatCannotBeKeptIsNeitherGivenNorUsed) {
  const Status no_space =
      Status::unavailable("cannot keep this node's membership votes: write /x: No space left on device");
  Disk disk;
  disk.failure = no_space;
  Membership voter = make(2, 3, OnPeerLoss::kShrink, 1, disk.keeping());
  MembershipNotice prepare{Kind::kPrepare, ViewId{0, 0}, {1, 0}, {}, std::nullopt};
  EXPECT_TRUE(voter.onNotice(0, prepare).send.empty()) << "no promise, and no refusal either";
  EXPECT_EQ(voter.takeKeepFailure().message(), no_space.message());
  EXPECT_TRUE(voter.takeKeepFailure().ok()) << "told once";
  disk.failure = {};
  auto promise = voter.onNotice(0, prepare);
  ASSERT_EQ(promise.send.size(), 1u) << "the same ballot, once it can be kept";
  EXPECT_EQ(promise.send[0].notice.kind, Kind::kPromise);
  ASSERT_EQ(disk.writes.size(), 1u);
  EXPECT_EQ(disk.writes[0], (VoteRecord{view(0, 0, 0, {0, 1, 2}), {1, 0}, std::nullopt}));

  // A leader whose own promise cannot be kept sends no prepare.
  Disk full;
  full.failure = no_space;
  Membership leader = make(0, 3, OnPeerLoss::kShrink, 1, full.keeping());
  leader.peerDown(2, clock_());
  EXPECT_TRUE(leader.review(clock_() + seconds(11)).send.empty());
  EXPECT_EQ(leader.takeKeepFailure().message(), no_space.message());
  full.failure = {};
  EXPECT_EQ(leader.review(clock_() + seconds(11)).send.size(), 1u) << "tried again at the next review";
}

TEST_F(MembershipTest, ARestartedNodeResumesTheViewItHadAndVotesOnlyFromThere) {
  // Installed epoch 2 and promised on its successor before the restart: a node that starts at
  // epoch 0 knows nothing of the votes on epochs 1 and 2, which were decided, and takes no
  // part in them.
  const MembershipView installed = view(2, 0, 0, {0, 1, 2});
  Disk disk;
  disk.record = VoteRecord{installed, {7, 0}, std::make_pair(Ballot{7, 0}, view(3, 0, 0, {0, 1}))};
  Membership m = make(1, 3, OnPeerLoss::kShrink, 1, disk.keeping());
  EXPECT_EQ(m.view().epoch, 0u);
  EXPECT_EQ(m.resumable(), installed);
  EXPECT_TRUE(m.onNotice(2, MembershipNotice{Kind::kPrepare, ViewId{0, 0}, {1, 2}, {}, std::nullopt}).send.empty());
  m.peerDown(0, clock_());  // it would lead a change without node 0
  EXPECT_TRUE(m.review(clock_() + seconds(11)).send.empty());
  ASSERT_TRUE(m.install(view(1, 0, 0, {0, 1, 2})));  // an older view, from a peer behind
  EXPECT_EQ(m.resumable(), installed) << "still behind what it had";
  EXPECT_TRUE(disk.writes.empty()) << "the kept record stays until the node is back where it was";
  ASSERT_TRUE(m.install(*m.resumable()));
  EXPECT_FALSE(m.resumable());
  EXPECT_TRUE(disk.writes.empty()) << "its record says the same";
  auto refused = m.onNotice(2, MembershipNotice{Kind::kPrepare, installed.id(), {6, 2}, {}, std::nullopt});
  ASSERT_EQ(refused.send.size(), 1u);
  EXPECT_EQ(refused.send[0].notice.kind, Kind::kRefuse);
  auto promise = m.onNotice(2, MembershipNotice{Kind::kPrepare, installed.id(), {8, 2}, {}, std::nullopt});
  ASSERT_EQ(promise.send.size(), 1u);
  EXPECT_EQ(promise.send[0].notice.view, view(3, 0, 0, {0, 1}));
  // The next view installed starts a record of its own, with no votes.
  ASSERT_TRUE(m.install(view(3, 0, 0, {0, 1})));
  EXPECT_EQ(disk.record, (VoteRecord{view(3, 0, 0, {0, 1}), {}, std::nullopt}));
}

TEST_F(MembershipTest, ALeaderThatPromisedAGreaterBallotMeanwhileDoesNotAcceptItsOwn) {
  Membership leader = make(0, 3);
  leader.peerDown(2, clock_());
  auto prepare = leader.review(clock_() + seconds(11));
  ASSERT_EQ(prepare.send.size(), 1u);
  const Ballot mine = prepare.send[0].notice.ballot;
  auto promise =
      leader.onNotice(1, MembershipNotice{Kind::kPrepare, ViewId{0, 0}, {mine.round + 1, 1}, {}, std::nullopt});
  ASSERT_EQ(promise.send.at(0).notice.kind, Kind::kPromise);
  // Node 1's promise of the leader's own ballot arrives late: a majority, but not to be used.
  auto late = leader.onNotice(1, MembershipNotice{Kind::kPromise, ViewId{0, 0}, mine, {}, std::nullopt});
  EXPECT_TRUE(late.send.empty());
  EXPECT_FALSE(late.install.has_value());
}

}  // namespace
}  // namespace gcagent::agent

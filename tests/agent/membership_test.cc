// Membership views: who proposes (the lowest member up), what (members gone past the grace
// period out, nodes back in), the order every node adopts by, and the notice's wire format.
#include "agent/membership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "scheduler/slicing.h"
#include "tests/common/epoch_clock.h"

namespace gcagent::agent {
namespace {

using ::testing::HasSubstr;
using std::chrono::seconds;

class MembershipTest : public ::testing::Test {
 protected:
  // Node `self` of `world`, every peer seen up once (as at the start).
  Membership make(uint32_t self, uint32_t world = 3, OnPeerLoss policy = OnPeerLoss::kShrink, uint32_t min_nodes = 1) {
    Membership m(world, self, policy, 10, min_nodes);
    for (uint32_t r = 0; r < world; ++r)
      if (r != self) m.peerUp(r);
    return m;
  }
  testing::EpochClock clock_;
};

TEST_F(MembershipTest, StartsWithEveryNodeAndOwnsAsTheSchedulerDoes) {
  Membership m = make(1);
  EXPECT_EQ(m.view(), (MembershipView{0, {0, 1, 2}}));
  for (uint32_t s = 0; s < 7; ++s) EXPECT_EQ(m.ownerOf(42, s), scheduler::ownerOf(42, s, 3));
}

TEST_F(MembershipTest, TheLeaderDropsAMemberGonePastTheGracePeriod) {
  Membership m = make(0);
  m.peerDown(2, clock_());
  EXPECT_FALSE(m.propose(clock_()).has_value());  // within the grace period
  clock_.jump(seconds(11));
  auto next = m.propose(clock_());
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, (MembershipView{1, {0, 1}}));
  ASSERT_TRUE(m.adopt(*next));
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
  EXPECT_EQ(*next, (MembershipView{1, {1}}));
}

TEST_F(MembershipTest, FailPolicyNeverProposesAndALateStarterIsNotGone) {
  Membership fail = make(0, 3, OnPeerLoss::kFail);
  fail.peerDown(2, clock_());
  clock_.jump(seconds(60));
  EXPECT_FALSE(fail.propose(clock_()).has_value());
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

TEST_F(MembershipTest, ANodeBackIsTakenInAndAnOutsiderWaits) {
  Membership leader = make(0);
  leader.peerDown(2, clock_());
  ASSERT_TRUE(leader.adopt({1, {0, 1}}));
  EXPECT_FALSE(leader.propose(clock_()).has_value());  // rank 2 still down
  leader.peerUp(2);
  auto next = leader.propose(clock_());
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(*next, (MembershipView{2, {0, 1, 2}}));
  Membership outsider = make(2);
  ASSERT_TRUE(outsider.adopt({1, {0, 1}}));
  EXPECT_FALSE(outsider.isMember(2));
  EXPECT_FALSE(outsider.propose(clock_()).has_value());
}

TEST_F(MembershipTest, EveryNodeAdoptsTheGreatestViewItHears) {
  Membership m = make(1);
  EXPECT_FALSE(m.adopt({0, {0, 1, 2}}));  // the same
  EXPECT_TRUE(m.adopt({1, {2}}));          // a cut-off node's own view
  EXPECT_TRUE(m.adopt({1, {0, 1}}));       // same epoch, more members: wins
  EXPECT_FALSE(m.adopt({1, {2}}));
  EXPECT_FALSE(m.adopt({0, {0, 1, 2}}));   // older
  EXPECT_TRUE(m.adopt({2, {0}}));
  EXPECT_EQ(m.view(), (MembershipView{2, {0}}));
  EXPECT_EQ(m.view().describe(), "epoch 2 (node 0)");
  EXPECT_EQ((MembershipView{3, {0, 2}}).describe(), "epoch 3 (nodes 0, 2)");
}

TEST(MembershipNoticeTest, RoundTripsWithItsGoldenBytesAndRefusesBadRanks) {
  const auto bytes = encodeMembershipNotice({7, {0, 2}});
  ASSERT_EQ(bytes.size(), 20u);
  EXPECT_EQ(static_cast<char>(bytes[0]), 'G');
  EXPECT_EQ(static_cast<char>(bytes[3]), 'M');
  EXPECT_EQ(static_cast<int>(bytes[6]), 2);   // member count
  EXPECT_EQ(static_cast<int>(bytes[8]), 7);   // epoch
  EXPECT_EQ(static_cast<int>(bytes[16]), 2);  // second rank
  EXPECT_TRUE(isMembershipNotice(bytes));
  auto back = parseMembershipNotice(bytes, 3);
  ASSERT_TRUE(back.ok()) << back.status().toString();
  EXPECT_EQ(*back, (MembershipView{7, {0, 2}}));
  EXPECT_THAT(parseMembershipNotice(bytes, 2).status().message(), HasSubstr("rank 2 of 2 nodes"));
  EXPECT_THAT(parseMembershipNotice(encodeMembershipNotice({1, {2, 0}}), 3).status().message(),
              HasSubstr("not ascending"));
  EXPECT_THAT(parseMembershipNotice(encodeMembershipNotice({1, {}}), 3).status().message(), HasSubstr("no members"));
  auto cut = bytes;
  cut.pop_back();
  EXPECT_THAT(parseMembershipNotice(cut, 3).status().message(), HasSubstr("19 bytes for 2 members"));
}

}  // namespace
}  // namespace gcagent::agent

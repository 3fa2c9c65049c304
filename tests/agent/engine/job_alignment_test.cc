#include "agent/engine/job_alignment.h"

#include <gtest/gtest.h>

namespace gcagent::agent {
namespace {

TEST(JobAlignmentTest, WithoutALossTrainerAndWireIterationsAreTheSame) {
  JobAlignment a;
  EXPECT_EQ(*a.start(1), 1u);
  EXPECT_EQ(*a.start(2), 2u);
  // A peer one step ahead (it finished iteration 2 first) is no news to a node that started it.
  EXPECT_TRUE(a.adopt(3));
  EXPECT_EQ(a.offset(), 0u);
  EXPECT_EQ(*a.start(3), 3u);
}

TEST(JobAlignmentTest, ANodeBehindMapsItsNextStepOntoThePeersIteration) {
  JobAlignment a;
  ASSERT_TRUE(a.start(93).ok());  // the step a frozen agent was in
  EXPECT_TRUE(a.adopt(700));      // the peers failed steps at once meanwhile, and wait at 700
  EXPECT_FALSE(a.adopt(650)) << "older news";
  EXPECT_EQ(a.offset(), 606u);
  EXPECT_EQ(*a.start(94), 700u);
  EXPECT_EQ(*a.start(95), 701u);
}

TEST(JobAlignmentTest, KeysOfTheStepInFlightFailSoTheNextStepStaysWhole) {
  JobAlignment a;
  ASSERT_TRUE(a.start(94).ok());  // one key of step 94 was submitted before the news
  ASSERT_TRUE(a.adopt(700));
  // Its other keys would land on 700 beside a key the peers never got: the step is given up.
  auto late = a.start(94);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().message(),
            "iteration 94 was given up to realign with the other nodes; the job goes on from this node's iteration 95");
  EXPECT_EQ(*a.start(95), 700u);
}

TEST(JobAlignmentTest, AStepTheOthersGaveUpFailsHereTooWhenItsNoticeComesBeforeItsSubmit) {
  JobAlignment a;
  ASSERT_TRUE(a.start(3).ok());  // completed here
  // A peer gave step 4 up (it goes on at 5) before this node's trainers submitted it.
  EXPECT_TRUE(a.adopt(5, /*fail_next_step=*/true));
  EXPECT_TRUE(a.nextGivenUp());
  EXPECT_EQ(a.peek(4), 0u);
  auto late = a.start(4);
  ASSERT_FALSE(late.ok()) << "fails here as it did there, at once";
  EXPECT_EQ(late.status().message(),
            "iteration 4 was given up to realign with the other nodes; the job goes on from this node's iteration 5");
  EXPECT_EQ(*a.start(5), 5u) << "and the step after it is the peers' next";
}

TEST(JobAlignmentTest, AfterAFailedStepTheNextOneMapsOntoThePeersNext) {
  JobAlignment a;
  ASSERT_TRUE(a.start(3).ok());
  a.failed(3);  // the trainers know: their step 3 failed here
  EXPECT_TRUE(a.newestFailed());
  EXPECT_TRUE(a.adopt(6, /*fail_next_step=*/!a.newestFailed()));
  EXPECT_FALSE(a.nextGivenUp());
  EXPECT_EQ(*a.start(4), 6u);
  EXPECT_FALSE(a.newestFailed()) << "a new step";
}

TEST(JobAlignmentTest, AGapOfSeveralGivenUpStepsCostsTheLateNodeOneStep) {
  JobAlignment a;
  ASSERT_TRUE(a.start(3).ok());
  EXPECT_TRUE(a.adopt(9, /*fail_next_step=*/true));  // the peers gave up 4 to 8
  EXPECT_FALSE(a.start(4).ok());
  EXPECT_EQ(*a.start(5), 9u);
}

TEST(JobAlignmentTest, ANodeAheadKeepsItsNumbering) {
  JobAlignment a;
  ASSERT_TRUE(a.start(700).ok());
  EXPECT_TRUE(a.adopt(95));  // a peer that was behind says where it is: it catches up, not this node
  EXPECT_EQ(a.offset(), 0u);
  EXPECT_EQ(*a.start(701), 701u);
}

TEST(JobAlignmentTest, ANodeThatStartedNothingStartsAtTheAgreedIteration) {
  JobAlignment a;  // a restarted agent's job
  EXPECT_TRUE(a.adopt(40));
  EXPECT_EQ(*a.start(3), 40u);
  EXPECT_EQ(*a.start(4), 41u);
}

TEST(JobAlignmentTest, PeekSaysWhereAStepWouldGoWithoutStartingIt) {
  JobAlignment fresh;  // a joining node's job, before its first step
  EXPECT_EQ(fresh.peek(1), 1u) << "no news: its own numbering";
  ASSERT_TRUE(fresh.adopt(57));
  EXPECT_EQ(fresh.peek(1), 57u);
  EXPECT_EQ(fresh.peek(1), 57u) << "a peek starts nothing";
  EXPECT_EQ(*fresh.start(1), 57u);
  EXPECT_EQ(fresh.peek(2), 58u);

  JobAlignment behind;
  ASSERT_TRUE(behind.start(94).ok());
  ASSERT_TRUE(behind.adopt(700));
  EXPECT_EQ(behind.peek(94), 0u) << "given up";
  EXPECT_EQ(behind.peek(95), 700u);
  EXPECT_EQ(*behind.start(95), behind.peek(95));
}

}  // namespace
}  // namespace gcagent::agent

// A job's bookkeeping on its own: submissions joined into one reduction only once every
// local rank's is in, and an iteration counted complete only when its last declared key is.
#include "agent/control/local_job.h"

#include <gtest/gtest.h>

#include <array>

namespace gcagent::agent {
namespace {

Contribution of(float* host, size_t index) {
  Contribution c;
  c.host = host;
  c.index = index;
  return c;
}

std::shared_ptr<LocalJob> job(LocalJobs& jobs, uint32_t local_size, size_t tensors = 1) {
  Status error;
  auto j = findOrCreateJob(jobs, "bert", local_size, &error);
  EXPECT_TRUE(j) << error.toString();
  j->tensors.resize(tensors);
  return j;
}

TEST(LocalJobTest, ContributionsJoinOnlyOnceEveryLocalRankIsInAndThenInRankOrder) {
  LocalJobs jobs;
  auto j = job(jobs, 3);
  std::array<float, 3> buffers{};
  EXPECT_FALSE(j->contribute(2, 5, 7, of(&buffers[2], 12)).ready);
  EXPECT_FALSE(j->contribute(0, 5, 7, of(&buffers[0], 10)).ready);
  // The same rank again, another key: neither completes (5, 7).
  EXPECT_FALSE(j->contribute(0, 5, 7, of(&buffers[0], 10)).ready);
  EXPECT_FALSE(j->contribute(1, 5, 8, of(&buffers[1], 11)).ready);
  EXPECT_FALSE(j->contribute(1, 6, 8, of(&buffers[1], 11)).ready);
  auto ready = j->contribute(1, 5, 7, of(&buffers[1], 11)).ready;
  ASSERT_TRUE(ready);
  ASSERT_EQ(ready->size(), 3u);
  for (size_t rank = 0; rank < 3; ++rank) {
    EXPECT_EQ((*ready)[rank].host, &buffers[rank]);
    EXPECT_EQ((*ready)[rank].index, 10 + rank);
  }
  // (5, 7) is no longer waiting; (6, 8) is, with its one submission ((5, 8) was given up
  // when rank 1 moved on to 6).
  EXPECT_EQ(j->pending.count({5, 7}), 0u);
  EXPECT_EQ(j->pending.size(), 1u);
  EXPECT_EQ(j->pending.count({6, 8}), 1u);
  // The same (iteration, key) again starts from nothing.
  EXPECT_FALSE(j->contribute(0, 5, 7, of(&buffers[0], 10)).ready);
}

TEST(LocalJobTest, LocalTrainersThatDriftedApartMeetAgainAtTheOneAhead) {
  // Each failed steps on its own while a peer was away: rank 0 got to 317, rank 1 to 318.
  LocalJobs jobs;
  auto j = job(jobs, 2);
  std::array<float, 2> buffers{};
  EXPECT_FALSE(j->contribute(0, 317, 0, of(&buffers[0], 0)).ready);
  Joined ahead = j->contribute(1, 318, 0, of(&buffers[1], 1));
  EXPECT_EQ(ahead.given_up, std::vector<uint64_t>{317}) << "rank 1 will never submit 317";
  EXPECT_FALSE(ahead.ready);
  // Rank 0's next step, 318, joins rank 1's.
  Joined caught_up = j->contribute(0, 318, 0, of(&buffers[0], 0));
  ASSERT_TRUE(caught_up.ready);
  EXPECT_TRUE(caught_up.given_up.empty());
  // The other way round: rank 1 waits at 320, rank 0 submits 319, which can never join.
  EXPECT_FALSE(j->contribute(1, 320, 0, of(&buffers[1], 1)).ready);
  Joined behind = j->contribute(0, 319, 0, of(&buffers[0], 0));
  EXPECT_TRUE(behind.behind);
  EXPECT_FALSE(behind.ready);
  EXPECT_TRUE(j->contribute(0, 320, 0, of(&buffers[0], 0)).ready);
}

TEST(LocalJobTest, ASingleTrainerJobReducesEachSubmissionAtOnce) {
  LocalJobs jobs;
  auto j = job(jobs, 1);
  float buffer = 0;
  auto ready = j->contribute(0, 1, 1, of(&buffer, 0)).ready;
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->size(), 1u);
  EXPECT_TRUE(j->pending.empty());
}

TEST(LocalJobTest, AnIterationCompletesWithItsLastKeyAndLastCompletedNeverGoesBack) {
  LocalJobs jobs;
  auto j = job(jobs, 1, 2);
  EXPECT_FALSE(j->keyCompleted(8));
  EXPECT_FALSE(j->keyCompleted(9));
  EXPECT_TRUE(j->keyCompleted(9));
  EXPECT_EQ(j->last_completed, 9u);
  EXPECT_EQ(j->keys_done.count(9), 0u);
  EXPECT_EQ(j->keys_done.at(8), 1u);
  EXPECT_TRUE(j->keyCompleted(8));  // an older iteration finishing late
  EXPECT_EQ(j->last_completed, 9u);
  EXPECT_TRUE(j->keys_done.empty());
}

TEST(LocalJobTest, AnIterationOfFewerKeysThanDeclaredCompletesOnceTheJobLearnedHowManyItReduces) {
  // Twelve tensors declared (say six of them a broadcast's), six reduced per step: the first
  // step counts against every declared tensor; once the trainers moved on, six is known.
  LocalJobs jobs;
  auto j = job(jobs, 1, 12);
  for (int k = 0; k < 6; ++k) j->reductionStarted(1);
  for (int k = 0; k < 6; ++k) EXPECT_FALSE(j->keyCompleted(1));
  for (int k = 0; k < 6; ++k) j->reductionStarted(2);
  EXPECT_EQ(j->keys_per_iteration, 6u);
  for (int k = 0; k < 5; ++k) EXPECT_FALSE(j->keyCompleted(2));
  EXPECT_TRUE(j->keyCompleted(2)) << "the last step of a run completes: a peer leaving after it fails nothing";
  EXPECT_EQ(j->last_completed, 2u);
}

TEST(LocalJobTest, TheFirstReasonALostJobWasGivenStays) {
  LocalJobs jobs;
  auto j = job(jobs, 2);
  j->loseAfter(4, Status::unavailable("trainer local rank 1 of job 'bert' left"));
  j->loseAfter(9, Status::unavailable("node 2 left"));
  EXPECT_EQ(j->lost.message(), "trainer local rank 1 of job 'bert' left");
  EXPECT_EQ(j->lost_after, 4u);
}

TEST(LocalJobTest, AJobIsFoundByNameAndItsLocalSizeMustAgree) {
  LocalJobs jobs;
  auto j = job(jobs, 2);
  EXPECT_EQ(j->members.size(), 2u);
  EXPECT_TRUE(j->deserted());
  Status error;
  EXPECT_EQ(findOrCreateJob(jobs, "bert", 2, &error), j);
  EXPECT_EQ(findOrCreateJob(jobs, "bert", 4, &error), nullptr);
  EXPECT_EQ(error.message(), "job 'bert' has 2 local trainers, this one says 4");
  auto other = findOrCreateJob(jobs, "gpt", 1, &error);
  ASSERT_TRUE(other);
  EXPECT_NE(other, j);
  EXPECT_EQ(jobs.size(), 2u);
  j->members[1] = reinterpret_cast<TrainerSession*>(&jobs);  // any member at all
  EXPECT_FALSE(j->deserted());
}

}  // namespace
}  // namespace gcagent::agent

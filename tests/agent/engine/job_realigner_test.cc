// The realignment of a job's iterations on its own, over the loopback transport: what a node
// announces as its frontier and to whom, what it gives up when it hears a later one, and a
// frontier heard before the job was declared here.
#include "agent/engine/job_realigner.h"

#include <gtest/gtest.h>

#include <map>

#include "agent/wire/peer_frame.h"
#include "tests/agent/coding/host_coders.h"
#include "transport/loopback/loopback.h"

namespace gcagent::agent {
namespace {

TensorRoute routeOf(uint64_t key) {
  TensorRoute r;
  r.spec.key = key;
  return r;
}

class JobRealignerTest : public ::testing::Test {
 protected:
  JobRealignerTest()
      : transports_(transport::makeLoopbackGroup(3)),
        host_(io_),
        stream_(host_.stream()),
        owner_(3, host_.make(), planner_, sampler_, [](uint64_t, uint64_t) { return nullptr; },
               [](const OwnerSide::Slice&, Result<SliceEncoding>, bool, uint32_t, bool) {},
               [](const std::string&) {}),
        realigner_(*transports_[0], owner_, stats_, [this](uint64_t job, KeyState& k, const Status& why) {
          failed_.push_back({job, k.spec.key, why.message()});
          k.active = false;
        }) {
    for (uint32_t r = 1; r < 3; ++r)
      transports_[r]->setHandlers(
          [this, r](const transport::Message& m) {
            auto frame = parsePeerFrame(m.header, 3);
            ASSERT_TRUE(frame.ok()) << frame.status().toString();
            heard_[r].push_back(std::get<RealignNotice>(*frame).next);
            reloads_heard_[r].push_back(std::get<RealignNotice>(*frame).reload_from);
          },
          nullptr);
    for (auto& t : transports_) EXPECT_TRUE(t->connect({}).ok());
    pump();
    job_.announced.assign(3, 0);
    job_.announced_reload.assign(3, 0);
    for (uint64_t key : {1, 2}) job_.keys.emplace(key, KeyState(routeOf(key)));
  }

  void pump() {
    for (int i = 0; i < 20; ++i)
      for (auto& t : transports_) t->progress();
  }

  KeyState& key(uint64_t k) { return job_.keys.at(k); }

  struct Failed {
    uint64_t job, key;
    std::string why;
  };

  std::vector<std::unique_ptr<transport::Transport>> transports_;
  asio::io_context io_;
  HostCoders host_;
  std::shared_ptr<HostStream> stream_;
  scheduler::Planner planner_{{}};
  ResidualSampler sampler_;
  metrics::Stats stats_;
  OwnerSide owner_;
  std::vector<Failed> failed_;
  JobRealigner realigner_;
  JobState job_;
  std::map<uint32_t, std::vector<uint64_t>> heard_;
  std::map<uint32_t, std::vector<uint64_t>> reloads_heard_;
};

TEST_F(JobRealignerTest, TheFrontierIsTheLowestIterationInFlightElseTheOneAfterTheLastFinished) {
  EXPECT_EQ(JobRealigner::frontierOf(job_), 0u) << "nothing started";
  key(1).completed_once = true;
  key(1).last_iteration = 9;
  EXPECT_EQ(JobRealigner::frontierOf(job_), 10u);
  key(2).active = true;
  key(2).iteration = 7;
  EXPECT_EQ(JobRealigner::frontierOf(job_), 7u);
}

TEST_F(JobRealignerTest, EachPeerHearsAFrontierOnceAndAgainAfterItCameBackUp) {
  key(1).completed_once = true;
  key(1).last_iteration = 4;
  realigner_.announceToAll(7, job_);
  realigner_.announce(7, job_, 1);  // heard already
  pump();
  EXPECT_EQ(heard_[1], std::vector<uint64_t>{5});
  EXPECT_EQ(heard_[2], std::vector<uint64_t>{5});
  realigner_.peerUp(7, job_, 2);  // a restarted peer knows nothing
  pump();
  EXPECT_EQ(heard_[1], std::vector<uint64_t>{5});
  EXPECT_EQ(heard_[2], (std::vector<uint64_t>{5, 5}));
}

TEST_F(JobRealignerTest, ALaterFrontierFailsWhatIsInFlightBelowItAndMapsTheNextStepOntoIt) {
  ASSERT_EQ(*job_.align.start(3), 3u);
  key(1).active = true;
  key(1).iteration = 3;
  EXPECT_TRUE(realigner_.realign(7, job_, 6, "rank 2 goes on at iteration 6"));
  ASSERT_EQ(failed_.size(), 1u);
  EXPECT_EQ(failed_[0].key, 1u);
  EXPECT_EQ(failed_[0].why, "iteration given up to realign with the other nodes: rank 2 goes on at iteration 6");
  EXPECT_EQ(realigner_.realignments(), 1u);
  // The trainers' next step, 4, is wire iteration 6.
  EXPECT_EQ(*job_.align.start(4), 6u);
  EXPECT_FALSE(realigner_.realign(7, job_, 6, "again")) << "no news";
  EXPECT_FALSE(realigner_.realign(7, job_, 5, "older")) << "no news";
  EXPECT_EQ(realigner_.realignments(), 1u);
}

TEST_F(JobRealignerTest, ANoticeBeforeTheSubmitOfAGivenUpStepFailsThatStepHereToo) {
  ASSERT_EQ(*job_.align.start(3), 3u);  // completed: nothing in flight, nothing failed
  key(1).completed_once = true;
  key(1).last_iteration = 3;
  EXPECT_TRUE(realigner_.realign(7, job_, 5, "rank 2 goes on at iteration 5"));
  EXPECT_TRUE(failed_.empty()) << "nothing was in flight";
  EXPECT_EQ(realigner_.realignments(), 1u);
  EXPECT_FALSE(job_.align.start(4).ok()) << "rank 2 gave step 4 up: it fails here as soon as it is submitted";
  EXPECT_EQ(*job_.align.start(5), 5u);
}

TEST_F(JobRealignerTest, ANoticeOfTheStepInFlightChangesNothingElse) {
  ASSERT_EQ(*job_.align.start(4), 4u);
  key(1).active = true;  // key 1 of step 4 in flight, key 2 not submitted yet
  key(1).iteration = 4;
  EXPECT_TRUE(realigner_.realign(7, job_, 5, "rank 2 goes on at iteration 5"));
  ASSERT_EQ(failed_.size(), 1u);
  EXPECT_FALSE(job_.align.start(4).ok()) << "key 2 of the failed step";
  EXPECT_EQ(*job_.align.start(5), 5u) << "the next step is the peers' next";
}

TEST_F(JobRealignerTest, GivingUpInFlightMovesPastTheNewestIterationAndTellsEveryPeer) {
  EXPECT_FALSE(realigner_.giveUpInFlight(7, job_, "a trainer connected again")) << "nothing in flight";
  ASSERT_TRUE(job_.align.start(4).ok());
  for (uint64_t k : {1, 2}) key(k).active = true;
  key(1).iteration = 3;
  key(2).iteration = 4;
  EXPECT_TRUE(realigner_.giveUpInFlight(7, job_, "a trainer connected again"));
  EXPECT_EQ(failed_.size(), 2u);
  pump();
  EXPECT_EQ(heard_[1], std::vector<uint64_t>{5});
  EXPECT_EQ(heard_[2], std::vector<uint64_t>{5});
}

TEST_F(JobRealignerTest, IterationsGivenUpCallAReloadThatEveryPeerHearsAndAdopts) {
  key(1).completed_once = true;
  key(1).last_iteration = 4;
  realigner_.announceToAll(7, job_);
  pump();
  EXPECT_EQ(reloads_heard_[1], std::vector<uint64_t>{0}) << "nothing given up: no reload";
  ASSERT_TRUE(job_.align.start(5).ok());
  key(1).active = true;
  key(1).iteration = 5;
  EXPECT_TRUE(realigner_.realign(7, job_, 8, "rank 2 goes on at iteration 8"));
  EXPECT_EQ(job_.reload.from(), 8u) << "another node may have completed what this one skipped";
  realigner_.announceToAll(7, job_);
  pump();
  EXPECT_EQ(heard_[1], (std::vector<uint64_t>{5, 8}));
  EXPECT_EQ(reloads_heard_[1], (std::vector<uint64_t>{0, 8}));
  // A later reload called elsewhere is adopted, even by a node that gave nothing up for it.
  EXPECT_FALSE(realigner_.onNotice(2, RealignNotice{7, 8, 11}, &job_));
  EXPECT_EQ(job_.reload.from(), 11u);
  realigner_.announce(7, job_, 1);  // the same frontier, a later reload: heard again
  pump();
  EXPECT_EQ(reloads_heard_[1], (std::vector<uint64_t>{0, 8, 11}));
}

TEST(JobReloadTest, TheFirstIterationCompletedFromTheCallReloadsOnEveryKeyAndALaterOneEndsIt) {
  JobReload reload;
  EXPECT_FALSE(reload.completes(3)) << "none called";
  reload.call(5);
  reload.call(4);  // an older call changes nothing
  EXPECT_FALSE(reload.completes(4)) << "completed before the iteration given up";
  EXPECT_TRUE(reload.completes(6));
  EXPECT_TRUE(reload.completes(6)) << "every key of that iteration";
  EXPECT_FALSE(reload.completes(7));
  EXPECT_EQ(reload.from(), 0u) << "done";
  reload.call(8);
  EXPECT_TRUE(reload.completes(8));
  reload.call(9);  // iteration 8 failed on some key after all: the reload moves on
  EXPECT_FALSE(reload.completes(8));
  EXPECT_TRUE(reload.completes(10));
}

TEST_F(JobRealignerTest, AFrontierHeardBeforeTheJobWasDeclaredIsWhereItsFirstStepStarts) {
  EXPECT_FALSE(realigner_.onNotice(2, RealignNotice{7, 12, 0}, nullptr));
  EXPECT_FALSE(realigner_.onNotice(1, RealignNotice{7, 10, 9}, nullptr)) << "the later one stays";
  realigner_.declared(7, job_);
  EXPECT_EQ(*job_.align.start(1), 12u);
  EXPECT_EQ(job_.reload.from(), 9u) << "a restarted agent's trainers kept their models: they reload too";
  JobState other;
  realigner_.declared(7, other);  // heard once, used once
  EXPECT_EQ(*other.align.start(1), 1u);
}

}  // namespace
}  // namespace gcagent::agent

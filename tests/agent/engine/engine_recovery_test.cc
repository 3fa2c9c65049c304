// Recovery in the reduction engine: reductions that need a lost peer fail at once, a job's
// nodes realign after a loss (job_alignment.h) and complete whole steps together again,
// deadlines end reductions that wait for nothing, slices of given-up iterations are counted
// as stale, not as bad messages, and a node back from a stall of its own completes a step in
// flight only as its peers did (stall_reconcile.cc).
#include <gtest/gtest.h>

#include <vector>

#include "agent/engine/reduction_engine.h"
#include "tests/agent/engine/engine_cluster.h"
#include "tests/common/epoch_clock.h"

namespace gcagent::agent {
namespace {

constexpr uint64_t kKeys[] = {10, 11};

EngineOptions options(SteadyNow now = steadyNow) {
  EngineOptions o;
  o.slice_elements = 1000;
  o.reduction_timeout = 30;
  o.now = std::move(now);
  return o;
}

// Node r's gradient of key k in trainer step s: its rank and step in every element, so a
// result shows which steps were summed.
struct Step {
  std::vector<std::vector<float>> buffers;  // by key
  Step(uint32_t r, uint64_t step) {
    for (uint64_t k : kKeys) buffers.emplace_back(3000, static_cast<float>(1000 * (r + 1) + step + k));
  }
};

class Recovery : public ::testing::Test {
 protected:
  explicit Recovery(EngineOptions o = options()) : c_(2, std::move(o)) {
    for (uint32_t r = 0; r < 2; ++r) EXPECT_TRUE(c_.engine(r).declareJob(job_, {{10, 3000, 0, {}, {}}, {11, 3000, -1, {}, {}}}).ok());
  }

  // Submits every key of node r's trainer step; returns the errors reduce() gave at once.
  std::vector<Status> submit(uint32_t r, uint64_t step, Step& s) {
    std::vector<Status> refused;
    for (size_t i = 0; i < std::size(kKeys); ++i)
      if (Status st = c_.engine(r).reduce(job_, step, kKeys[i], {s.buffers[i].data()}); !st.ok()) refused.push_back(st);
    return refused;
  }

  // Both nodes submit step 1; node 0 completes it while node 1 is frozen before it hears the
  // results it needs (they wait in its queue).
  void node0CompletesStep1WhileNode1IsFrozen(Step& a, Step& b) {
    submit(0, 1, a);
    submit(1, 1, b);
    c_.settleCoders();
    c_.freeze(0, true);
    c_.pump();  // node 1 sums its slices and sends them to node 0
    c_.freeze(0, false);
    c_.freeze(1, true);
    c_.pump();  // node 0 completes; its results wait for node 1
  }

  // Node r's reports, taken (a failure is reported once the coders dropped its work: they run
  // first, delivering nothing over the links).
  std::vector<Done> reports(uint32_t r) {
    c_.settleCoders();
    return std::exchange(c_.done(r), {});
  }

  void lose() {
    c_.cut(0, 1, true);
    c_.engine(0).onPeerDown(1, Status::deadlineExceeded("nothing heard"));
    c_.engine(1).onPeerDown(0, Status::deadlineExceeded("nothing heard"));
  }
  void restore() {
    c_.cut(0, 1, false);
    c_.engine(0).onPeerUp(1);
    c_.engine(1).onPeerUp(0);
  }

  const uint64_t job_ = jobIdOf("recovery");
  Cluster c_;
};

void expectCompleted(const std::vector<Done>& done, uint64_t step) {
  ASSERT_EQ(done.size(), std::size(kKeys));
  for (const Done& d : done) {
    EXPECT_TRUE(d.status.ok()) << d.status.toString();
    EXPECT_EQ(d.iteration, step);
  }
}

TEST_F(Recovery, AReductionThatNeedsALostPeerFailsAtOnceNamingIt) {
  Step s(0, 1);
  lose();
  const auto refused = submit(0, 1, s);
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_EQ(refused[0].message(), "peer rank 1 is down: nothing heard");
  EXPECT_EQ(c_.gauge(0, metrics::Id::send_queue, {"1"}), 0u);
}

TEST_F(Recovery, AfterALossTheNodeBehindJumpsToThePeersIterationAndStepsCompleteWhole) {
  Step a1(0, 1), b1(1, 1);
  submit(0, 1, a1);
  submit(1, 1, b1);
  c_.pump();
  expectCompleted(reports(0), 1);
  expectCompleted(reports(1), 1);

  // Node 1 freezes in step 2; node 0 loses it and its trainers fail steps 2..9 at once.
  Step b2(1, 2);
  submit(1, 2, b2);
  lose();
  EXPECT_EQ(reports(1).size(), 2u);  // failed: the peer is lost
  for (uint64_t step = 2; step <= 9; ++step) {
    Step a(0, step);
    EXPECT_EQ(submit(0, step, a).size(), 2u) << step;
  }
  restore();  // each side says where it goes on: node 0 at 10, node 1 at 3
  c_.pump();
  // Node 1's next step (3) lands on node 0's 10: both sum the same pair of steps.
  Step a10(0, 10), b3(1, 3);
  ASSERT_TRUE(submit(1, 3, b3).empty());
  ASSERT_TRUE(submit(0, 10, a10).empty());
  c_.pump();
  // Steps refused at once call a reload as failed ones do: both nodes' first step after it.
  for (uint32_t r = 0; r < 2; ++r) {
    auto done = reports(r);
    expectCompleted(done, r == 0 ? 10 : 3);
    for (const Done& d : done) EXPECT_EQ(d.reload_root, std::optional<uint32_t>(0)) << "node " << r;
  }
  for (size_t i = 0; i < std::size(kKeys); ++i) {
    const float want = (Step(0, 10).buffers[i][0] + Step(1, 3).buffers[i][0]) / 2;
    EXPECT_EQ(a10.buffers[i], std::vector<float>(3000, want));
    EXPECT_EQ(b3.buffers[i], a10.buffers[i]);
  }
  EXPECT_EQ(c_.engine(1).counters().realignments, 1u);
  EXPECT_EQ(c_.engine(0).counters().realignments, 0u) << "the node ahead gives nothing up";
  EXPECT_EQ(c_.engine(0).counters().bad_messages + c_.engine(1).counters().bad_messages, 0u);
}

TEST_F(Recovery, AStepSentBeforeTheNewsFailsWholeAndTheNextOneMatches) {
  Step a1(0, 1), b1(1, 1);
  submit(0, 1, a1);
  submit(1, 1, b1);
  c_.pump();
  reports(0), reports(1);
  lose();
  for (uint64_t step = 2; step <= 5; ++step) {
    Step a(0, step);
    submit(0, step, a);
  }
  // Node 1's trainer submits step 2 before node 0's notice arrives: its contributions reach a
  // node that gave iteration 2 up (stale), and the notice fails the step on node 1.
  c_.cut(0, 1, false);
  c_.engine(0).onPeerUp(1);
  Step b2(1, 2);
  ASSERT_TRUE(submit(1, 2, b2).empty());
  c_.settleCoders();  // its contributions leave
  c_.engine(1).onPeerUp(0);
  c_.pump();
  auto failed = reports(1);
  ASSERT_EQ(failed.size(), 2u);
  for (const Done& d : failed) {
    EXPECT_EQ(d.iteration, 2u);
    EXPECT_EQ(d.status.message(),
              "iteration given up to realign with the other nodes: rank 0 goes on at iteration 6");
  }
  EXPECT_GT(c_.engine(0).counters().stale_slices, 0u);
  EXPECT_EQ(c_.engine(0).counters().bad_messages, 0u) << "late slices of a given-up iteration are not hostile";
  Step a6(0, 6), b3(1, 3);
  ASSERT_TRUE(submit(0, 6, a6).empty());
  ASSERT_TRUE(submit(1, 3, b3).empty());
  c_.pump();
  expectCompleted(reports(0), 6);
  expectCompleted(reports(1), 3);
  EXPECT_EQ(a6.buffers, b3.buffers);
}

TEST_F(Recovery, AStepCompletedOnOneNodeAndGivenUpOnTheOtherIsFollowedByAReloadOnBoth) {
  Step a1(0, 1), b1(1, 1);
  node0CompletesStep1WhileNode1IsFrozen(a1, b1);
  auto done = reports(0);
  expectCompleted(done, 1);
  for (const Done& d : done) EXPECT_FALSE(d.reload_root) << "no step was given up yet";
  // Node 1 gives the step up before its results arrive (a trainer of it connected again): the
  // two nodes' models now differ by step 1. No protocol can prevent that (the last message
  // may always be lost); both nodes reload one node's weights after their next step instead.
  c_.engine(1).giveUp(job_, Status::unavailable("a trainer connected again"));
  auto failed = reports(1);
  ASSERT_EQ(failed.size(), 2u);
  for (const Done& d : failed) EXPECT_FALSE(d.status.ok());
  c_.freeze(1, false);
  c_.pump();
  EXPECT_TRUE(reports(1).empty()) << "node 0's results of the step given up are stale";
  for (uint64_t step : {2, 3}) {
    Step a(0, step), b(1, step);
    ASSERT_TRUE(submit(0, step, a).empty());
    ASSERT_TRUE(submit(1, step, b).empty());
    c_.pump();
    for (uint32_t r = 0; r < 2; ++r) {
      done = reports(r);
      expectCompleted(done, step);
      for (const Done& d : done) {
        if (step == 2) {
          ASSERT_TRUE(d.reload_root) << "node " << r << " key " << d.key;
          EXPECT_EQ(*d.reload_root, 0u) << "the lowest member";
        } else {
          EXPECT_FALSE(d.reload_root) << "one reload per call";
        }
      }
    }
    EXPECT_EQ(a.buffers, b.buffers);
  }
}

class Deadline : public Recovery {
 protected:
  Deadline() : Recovery(options(clock_.now())) {}
  static inline testing::EpochClock clock_{std::chrono::seconds(100)};
};

TEST_F(Deadline, AReductionPastItsDeadlineFailsAndItsIterationIsGivenUpEverywhere) {
  // Node 0 sends its step 1; node 1's trainer does not submit it in time (it hangs in its own
  // code, or starts late).
  Step a1(0, 1);
  submit(0, 1, a1);
  c_.pump();
  c_.engine(0).tick();
  EXPECT_TRUE(reports(0).empty()) << "not yet due";
  clock_.jump(std::chrono::seconds(31));
  c_.engine(0).tick();
  auto failed = reports(0);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[0].status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(failed[0].status.message(), "iteration given up to realign with the other nodes: not reduced within 30 s "
                                        "(transport.reduction_timeout)");
  c_.pump();
  // Node 1's trainer comes back with its first step: it lands on node 0's next one, 2.
  Step a2(0, 2), b1(1, 1);
  ASSERT_TRUE(submit(1, 1, b1).empty());
  ASSERT_TRUE(submit(0, 2, a2).empty());
  c_.pump();
  expectCompleted(reports(0), 2);
  expectCompleted(reports(1), 1);
  EXPECT_EQ(a2.buffers, b1.buffers);
}

TEST_F(Deadline, AJobWhoseReductionsKeepFailingIsStalled) {
  lose();
  for (uint64_t step = 1; step <= 3; ++step) {
    Step a(0, step);
    submit(0, step, a);
  }
  EXPECT_EQ(c_.engine(0).tick(), 0u) << "failing for less than a reduction timeout";
  clock_.jump(std::chrono::seconds(31));
  Step a(0, 4);
  submit(0, 4, a);
  EXPECT_EQ(c_.engine(0).tick(), 1u);
  clock_.jump(std::chrono::seconds(31));
  EXPECT_EQ(c_.engine(0).tick(), 0u) << "its trainers stopped trying: idle, not stalled";
  restore();
  c_.pump();
  // Node 1 started nothing yet: its first step lands where node 0 goes on.
  Step a5(0, 5), b1(1, 1);
  ASSERT_TRUE(submit(0, 5, a5).empty());
  ASSERT_TRUE(submit(1, 1, b1).empty());
  c_.pump();
  expectCompleted(reports(0), 5);
  expectCompleted(reports(1), 1);
  EXPECT_EQ(c_.engine(0).tick(), 0u);
}

// Node 1's agent stops (SIGSTOP) with step 1 in flight, past the peer timeout.
class Stall : public Deadline {
 protected:
  // Both nodes send their step 1 and node 1 stops before it hears anything back.
  void bothSendThenNode1Stops(Step& a, Step& b) {
    submit(0, 1, a);
    submit(1, 1, b);
    c_.settleCoders();  // the shares leave
    c_.freeze(1, true);
  }
  void node1Resumes() {
    c_.engine(1).onStalled(8.0);
    c_.freeze(1, false);
  }
};

TEST_F(Stall, AStepThePeerGaveUpWhileTheNodeWasAwayFailsThereTooThoughItsResultsWereWaiting) {
  Step a1(0, 1), b1(1, 1);
  bothSendThenNode1Stops(a1, b1);
  c_.pump();  // node 0 sums its slices and sends them; node 1's never come
  EXPECT_TRUE(reports(0).empty());
  c_.engine(0).onPeerDown(1, Status::deadlineExceeded("nothing heard for 2 s"));
  ASSERT_EQ(reports(0).size(), 2u);  // failed on node 0
  node1Resumes();
  c_.pump();  // node 1 finds node 0's shares and results: without the peer's word it would complete
  auto failed = reports(1);
  ASSERT_EQ(failed.size(), 2u);
  for (const Done& d : failed) {
    EXPECT_EQ(d.iteration, 1u);
    EXPECT_EQ(d.status.message(), "iteration 1 was given up by rank 0 while this agent was stalled");
  }
  EXPECT_EQ(c_.engine(1).stats().recovery(metrics::Stats::kStalled).Value(), 1);
  // Both go on together from the next step.
  c_.engine(0).onPeerUp(1);
  c_.pump();
  Step a2(0, 2), b2(1, 2);
  ASSERT_TRUE(submit(0, 2, a2).empty());
  ASSERT_TRUE(submit(1, 2, b2).empty());
  c_.pump();
  expectCompleted(reports(0), 2);
  expectCompleted(reports(1), 2);
  EXPECT_EQ(a2.buffers, b2.buffers);
}

TEST_F(Stall, AStepThePeerCompletedBeforeTheNodeWasLostCompletesThereTooThoughItsLinkBroke) {
  Step a1(0, 1), b1(1, 1);
  node0CompletesStep1WhileNode1IsFrozen(a1, b1);
  expectCompleted(reports(0), 1);
  c_.engine(0).onPeerDown(1, Status::deadlineExceeded("nothing heard for 2 s"));
  node1Resumes();
  // Back from the stall, node 1 also finds its link to node 0 broken (node 0 dropped it):
  // that fails nothing held; node 0's answer decides.
  c_.engine(1).onPeerDown(0, Status::unavailable("link closed"));
  EXPECT_TRUE(reports(1).empty());
  c_.pump();
  expectCompleted(reports(1), 1);
  EXPECT_EQ(a1.buffers, b1.buffers);
  for (size_t i = 0; i < std::size(kKeys); ++i)
    EXPECT_EQ(b1.buffers[i][0], (Step(0, 1).buffers[i][0] + Step(1, 1).buffers[i][0]) / 2);
}

TEST_F(Stall, AStepHeldFailsWhenThePeersTrainersLeftMeanwhile) {
  Step a1(0, 1), b1(1, 1);
  bothSendThenNode1Stops(a1, b1);
  c_.pump();
  c_.engine(0).onPeerDown(1, Status::deadlineExceeded("nothing heard for 2 s"));
  c_.engine(0).dropJob(job_);  // its trainer failed and left; the notice could not reach node 1
  node1Resumes();
  c_.pump();
  auto failed = reports(1);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[0].status.message(),
            strCat("rank 0 has no job ", job_, " any more: its trainers left while this agent was stalled"));
}

TEST_F(Stall, StepsHeldWhileNoPeerAnswersFailAtTheDeadline) {
  Step a1(0, 1), b1(1, 1);
  bothSendThenNode1Stops(a1, b1);
  c_.pump();
  c_.cut(0, 1, true);  // node 0 is gone: nobody answers
  node1Resumes();
  c_.engine(1).onPeerDown(0, Status::unavailable("link closed"));
  c_.pump();
  c_.engine(1).tick();
  EXPECT_TRUE(reports(1).empty()) << "held until the deadline";
  clock_.jump(std::chrono::seconds(31));
  c_.engine(1).tick();
  auto failed = reports(1);
  ASSERT_EQ(failed.size(), 2u);
  EXPECT_EQ(failed[0].status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(failed[0].status.message(),
            "after this agent's stall, rank(s) 0 did not say in time whether they gave the step up");
}

TEST_F(Stall, AStepStartedAfterTheStallCompletesWhenThePeersGaveNothingUp) {
  c_.engine(1).onStalled(8.0);
  Step a1(0, 1), b1(1, 1);
  ASSERT_TRUE(submit(0, 1, a1).empty());
  ASSERT_TRUE(submit(1, 1, b1).empty());
  c_.pump();
  expectCompleted(reports(0), 1);
  expectCompleted(reports(1), 1);
}

}  // namespace
}  // namespace gcagent::agent

// Where a tensor reduces is decided once, from every local trainer's declaration and the
// tensor's route, and a declaration that would move a tensor mid-reduction is refused.
#include "agent/control/tensor_placement.h"

#include <gtest/gtest.h>

#include "agent/coding/host_coder_device.h"
#include "agent/coding/local_coder.h"
#include "agent/control/local_job.h"

namespace gcagent::agent {
namespace {

// Two coders standing for two GPUs' (host coders: real ones, only their identity matters).
struct Coders {
  asio::io_context io;
  std::shared_ptr<LocalCoder> a = std::make_shared<LocalCoder>(makeHostCoderDevice(io));
  std::shared_ptr<LocalCoder> b = std::make_shared<LocalCoder>(makeHostCoderDevice(io));
};

TEST(TensorPlacementTest, OnTheGpuOnlyWhenEveryTrainerIsOnOneCoderAndTheRouteCodesThere) {
  Coders c;
  const MemberSlots host{}, on_a{true, c.a}, on_b{true, c.b}, stage_only{true, nullptr};
  EXPECT_EQ(placeTensor({host, host}, true), (TensorPlacement{Placement::kHost, nullptr}));
  EXPECT_EQ(placeTensor({on_a, on_a}, true), (TensorPlacement{Placement::kDevice, c.a}));
  // The route stages its codec (compress.gpu_staged_codecs).
  EXPECT_EQ(placeTensor({on_a, on_a}, false).where, Placement::kStaged);
  // Two GPUs, a GPU beside a host trainer, a path with no coder: through the host buffers.
  EXPECT_EQ(placeTensor({on_a, on_b}, true).where, Placement::kStaged);
  EXPECT_EQ(placeTensor({on_a, host}, true).where, Placement::kStaged);
  EXPECT_EQ(placeTensor({host, on_a}, true).where, Placement::kStaged);
  EXPECT_EQ(placeTensor({stage_only}, true).where, Placement::kStaged);
  EXPECT_EQ(describe(Placement::kDevice), "on the GPU");
}

std::shared_ptr<LocalJob> twoTrainerJob(LocalJobs& jobs) {
  Status error;
  auto job = findOrCreateJob(jobs, "placed", 2, &error);
  EXPECT_TRUE(job) << error.toString();
  job->routesDeclared({{1, true}, {2, false}});
  return job;
}

TEST(TensorPlacementTest, AJobDecidesOnceEveryLocalTrainerDeclared) {
  Coders c;
  LocalJobs jobs;
  auto job = twoTrainerJob(jobs);
  job->declareSlots(0, {true, c.a});
  EXPECT_TRUE(job->placements.empty());  // rank 1 has not declared
  EXPECT_EQ(job->placementOf(1).where, Placement::kHost);
  job->declareSlots(1, {true, c.a});
  EXPECT_EQ(job->placementOf(1), (TensorPlacement{Placement::kDevice, c.a}));
  EXPECT_EQ(job->placementOf(2).where, Placement::kStaged);  // its route stages it
  // Re-declared on the host, nothing in flight: decided again.
  ASSERT_TRUE(job->checkSlots(1, {}).ok());
  job->declareSlots(1, {});
  EXPECT_EQ(job->placementOf(1).where, Placement::kStaged);
  // New routes (a re-declaration of the tensors) are placed under the slots in force.
  job->routesDeclared({{1, true}, {3, true}});
  EXPECT_EQ(job->placementOf(3).where, Placement::kStaged);
  EXPECT_EQ(job->placements.count(2), 0u);
}

TEST(TensorPlacementTest, NoTensorMovesWhileAReductionIsInFlight) {
  Coders c;
  LocalJobs jobs;
  auto job = twoTrainerJob(jobs);
  job->declareSlots(0, {true, c.a});
  // Rank 0 submitted before rank 1 declared: nothing was placed yet, so nothing moves.
  job->inFlight = 1;
  EXPECT_TRUE(job->checkSlots(1, {}).ok());
  job->inFlight = 0;
  job->declareSlots(1, {true, c.a});
  job->inFlight = 1;
  // The same slots again: nothing moves, allowed.
  EXPECT_TRUE(job->checkSlots(1, {true, c.a}).ok());
  const Status moved = job->checkSlots(1, {});
  EXPECT_EQ(moved.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(moved.message(), "job 'placed': local rank 1 cannot move its tensors between host and GPU while a "
                             "reduction is in flight");
  job->inFlight = 0;
  EXPECT_TRUE(job->checkSlots(1, {}).ok());
}

TEST(TensorPlacementTest, ATensorOneTrainerContributesJoinsAtOnceAndReducesWhereItsGradientIs) {
  Coders c;
  LocalJobs jobs;
  Status error;
  auto job = findOrCreateJob(jobs, "hsdp", 2, &error);
  ASSERT_TRUE(job) << error.toString();
  // Shard 1 is local rank 0's, shard 2 local rank 1's (reduce.contributor); 3 is everyone's.
  job->routesDeclared({{1, true, 0}, {2, true, 1}, {3, true, {}}});
  job->declareSlots(0, {true, c.a});
  job->declareSlots(1, {});
  EXPECT_EQ(job->placementOf(1), (TensorPlacement{Placement::kDevice, c.a}));
  EXPECT_EQ(job->placementOf(2).where, Placement::kHost);
  EXPECT_EQ(job->placementOf(3).where, Placement::kStaged);
  float mine = 1;
  Contribution one;
  one.host = &mine;
  auto joined = job->contribute(1, 7, 2, one);
  ASSERT_TRUE(joined.ready) << "nobody else contributes tensor 2";
  ASSERT_EQ(joined.ready->size(), 1u);
  EXPECT_EQ((*joined.ready)[0].host, &mine);
  EXPECT_TRUE(job->pending.empty());
  EXPECT_TRUE(job->checkContributor(1, 2).ok());
  EXPECT_TRUE(job->checkContributor(0, 3).ok());
  EXPECT_EQ(job->checkContributor(0, 2).message(),
            "tensor 2 is contributed by local rank 1 alone (reduce.contributor); local rank 0 submitted it");
}

}  // namespace
}  // namespace gcagent::agent

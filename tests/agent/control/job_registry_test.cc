#include "agent/control/job_registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/str_cat.h"

namespace gcagent::agent {
namespace {

// Writes down what reaches it, into a log shared by every part.
class RecordingPart : public JobPart {
 public:
  RecordingPart(std::string name, std::vector<std::string>& log) : name_(std::move(name)), log_(log) {}
  void failJob(uint64_t job, const Status& why) override { log_.push_back(strCat(name_, " fail ", job, " ", why.message())); }
  void dropJob(uint64_t job) override { log_.push_back(strCat(name_, " drop ", job)); }

 private:
  std::string name_;
  std::vector<std::string>& log_;
};

Result<std::vector<DeclaredTensor>> nothingDeclared(uint64_t, const std::vector<TensorSpec>&) {
  return Status::failedPrecondition("no declaration expected");
}

// Stands for the engine: writes down what it is handed; tensors of key 9 it refuses.
struct RecordingDeclarer {
  std::vector<std::vector<TensorSpec>> calls;
  Result<std::vector<DeclaredTensor>> operator()(uint64_t, const std::vector<TensorSpec>& tensors) {
    calls.push_back(tensors);
    std::vector<DeclaredTensor> out;
    for (const TensorSpec& t : tensors) {
      if (t.key == 9) return Status::invalidArgument("tensor 9: codec 'nope' is not known");
      out.push_back({t.key, t.codec.name != "topk"});
    }
    return out;
  }
};

shm::protocol::TensorDecl decl(uint64_t key, std::string codec, std::vector<std::pair<std::string, std::string>> params = {}) {
  shm::protocol::TensorDecl t;
  t.key = key;
  t.elements = 100;
  t.codec = std::move(codec);
  t.params = std::move(params);
  return t;
}

TEST(JobRegistryTest, ADeclarationReachesTheEngineOnceAndTheJobKeepsItsRoutes) {
  RecordingDeclarer engine;
  JobRegistry registry([&engine](uint64_t job, const std::vector<TensorSpec>& t) { return engine(job, t); });
  Status error;
  auto job = registry.findOrCreate("vgg", 2, &error);
  ASSERT_NE(job, nullptr) << error.toString();
  const std::vector<shm::protocol::TensorDecl> tensors = {decl(1, "2bit", {{"reduce.result", "sum"}, {"threshold", "0.5"}}),
                                                          decl(2, "topk")};
  ASSERT_TRUE(registry.declare(*job, tensors).ok());
  ASSERT_EQ(engine.calls.size(), 1u);
  // The reduction policy is taken out of the parameters; what is left is the codec's.
  EXPECT_EQ(engine.calls[0][0].policy.result, ResultKind::kSum);
  EXPECT_EQ(engine.calls[0][0].codec.params, (compress::Params{{"threshold", "0.5"}}));
  EXPECT_EQ(job->generation, 1u);
  EXPECT_TRUE(job->routes.at(1).device_coded);
  EXPECT_FALSE(job->routes.at(2).device_coded);
  // The second trainer declares the same tensors: nothing reaches the engine.
  ASSERT_TRUE(registry.declare(*job, tensors).ok());
  EXPECT_EQ(engine.calls.size(), 1u);
  EXPECT_EQ(job->generation, 1u);
}

TEST(JobRegistryTest, ARefusedDeclarationLeavesTheJobAsItWas) {
  RecordingDeclarer engine;
  JobRegistry registry([&engine](uint64_t job, const std::vector<TensorSpec>& t) { return engine(job, t); });
  Status error;
  auto job = registry.findOrCreate("vgg", 1, &error);
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(registry.declare(*job, {decl(1, "2bit")}).ok());
  Status bad_policy = registry.declare(*job, {decl(1, "2bit", {{"reduce.result", "median"}})});
  EXPECT_EQ(bad_policy.message(), "tensor 1: reduce.result 'median' is not one of: average, sum");
  EXPECT_EQ(registry.declare(*job, {decl(9, "nope")}).message(), "tensor 9: codec 'nope' is not known");
  EXPECT_EQ(registry.declare(*job, {decl(3, "none", {{"reduce.contributor", "1"}})}).message(),
            "tensor 3: reduce.contributor 1 is not a local rank of job 'vgg' (1 local trainers)");
  job->inFlight = 1;
  EXPECT_EQ(registry.declare(*job, {decl(2, "2bit")}).message(),
            "job 'vgg': tensors cannot change while a reduction is in flight");
  EXPECT_EQ(job->generation, 1u);
  EXPECT_EQ(job->tensors, (std::vector<shm::protocol::TensorDecl>{decl(1, "2bit")}));
  EXPECT_EQ(job->routes.size(), 1u);
}

TEST(JobRegistryTest, AFailureReachesEveryPartInOrderAndKeepsTheJob) {
  std::vector<std::string> log;
  RecordingPart trainers("trainers", log), engine("engine", log);
  JobRegistry registry(nothingDeclared);
  registry.attach(trainers);
  registry.attach(engine);
  Status error;
  auto job = registry.findOrCreate("resnet", 2, &error);
  ASSERT_NE(job, nullptr) << error.toString();
  registry.fail(job->id, Status::unavailable("a trainer left"));
  EXPECT_EQ(log, (std::vector<std::string>{strCat("trainers fail ", job->id, " a trainer left"),
                                           strCat("engine fail ", job->id, " a trainer left")}));
  EXPECT_EQ(registry.find(job->id), job) << "failing a job keeps it";
  log.clear();
  registry.drop(job->id);
  EXPECT_EQ(log, (std::vector<std::string>{strCat("trainers drop ", job->id), strCat("engine drop ", job->id)}));
  EXPECT_EQ(registry.find(job->id), nullptr);
}

TEST(JobRegistryTest, FailAllReachesEveryJobAndALocalSizeMismatchIsRefused) {
  std::vector<std::string> log;
  RecordingPart part("part", log);
  JobRegistry registry(nothingDeclared);
  registry.attach(part);
  Status error;
  auto a = registry.findOrCreate("a", 1, &error);
  auto b = registry.findOrCreate("b", 1, &error);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(registry.findOrCreate("a", 1, &error), a) << "found, not made again";
  EXPECT_EQ(registry.findOrCreate("a", 3, &error), nullptr);
  EXPECT_FALSE(error.ok());
  registry.failAll(Status::unavailable("stopping"));
  std::sort(log.begin(), log.end());
  std::vector<std::string> want{strCat("part fail ", a->id, " stopping"), strCat("part fail ", b->id, " stopping")};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(log, want);
  EXPECT_EQ(registry.jobs().size(), 2u);
}

}  // namespace
}  // namespace gcagent::agent

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

TEST(JobRegistryTest, AFailureReachesEveryPartInOrderAndKeepsTheJob) {
  std::vector<std::string> log;
  RecordingPart trainers("trainers", log), engine("engine", log);
  JobRegistry registry;
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
  JobRegistry registry;
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

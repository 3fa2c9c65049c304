// The owner side on its own: three nodes' contributions to one slice, on a manual host
// stream, against a reference sum added in rank order.
#include "agent/engine/owner_side.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "agent/coding/host_coder_device.h"
#include "tests/agent/coding/host_coders.h"

namespace gcagent::agent {
namespace {

class OwnerSideTest : public ::testing::Test {
 protected:
  OwnerSideTest()
      : planner_({scheduler::Selection::kSize, 0, 3, 1000, 5.0}),
        route_(makeRoute({5, 1000, 0, {"none", {}}, {}}, {{"none", {}}, "same", 1000, {}, true}, planner_, stats_).value()),
        stream_(host_.stream()),
        owner_(3, std::make_shared<LocalCoder>(makeHostCoderDevice(stream_)), planner_, sampler_,
               [this](uint64_t job, uint64_t key) -> TensorRoute* { return job == 1 && key == 5 ? &route_ : nullptr; },
               [this](const OwnerSide::Slice& s, Result<SliceEncoding> r, bool compressed, uint32_t contributors, bool) {
                 ASSERT_TRUE(r.ok()) << r.status().toString();
                 EXPECT_FALSE(compressed);
                 EXPECT_EQ(s.iteration, 4u);
                 results_.emplace_back(r->bytes.size() / sizeof(float));
                 std::memcpy(results_.back().data(), r->bytes.data(), r->bytes.size());
                 contributors_ = contributors;
               },
               [this](const std::string& why) { refused_.push_back(why); }) {
    replan(route_, planner_, 0, false);
  }

  // Rank r's contribution: its floats, uncompressed, pinned by a copy of its own.
  OwnerSide::Contribution contribution(uint32_t r) {
    auto values = std::make_shared<std::vector<float>>(1000);
    for (size_t i = 0; i < values->size(); ++i) (*values)[i] = 0.1f * static_cast<float>(r + 1) + 1e-7f * i;
    const std::span<const std::byte> bytes = std::as_bytes(std::span<const float>(*values));
    return {values, bytes, false, 2};
  }

  metrics::Stats stats_;
  scheduler::Planner planner_;
  ResidualSampler sampler_;
  TensorRoute route_;
  asio::io_context io_;
  HostCoders host_{io_};
  std::shared_ptr<HostStream> stream_;
  OwnerSide owner_;
  std::vector<std::vector<float>> results_;
  uint32_t contributors_ = 0;
  std::vector<std::string> refused_;
};

TEST_F(OwnerSideTest, ContributionsAreSummedInRankOrderWhateverOrderTheyArrive) {
  std::vector<float> want(1000);
  for (size_t i = 0; i < want.size(); ++i) {
    const float c0 = 0.1f * 1 + 1e-7f * i, c1 = 0.1f * 2 + 1e-7f * i, c2 = 0.1f * 3 + 1e-7f * i;
    want[i] = (c0 + c1) + c2;
  }
  const OwnerSide::Slice slice{1, 5, 0, 4};
  owner_.add(slice, 2, contribution(2));
  host_.poll();
  EXPECT_EQ(owner_.pending(), 1u) << "rank 2 waits for ranks 0 and 1";
  std::vector<double> waiting(3, 0);
  owner_.countWaiting(waiting);
  EXPECT_EQ(waiting, (std::vector<double>{1, 1, 0}));
  owner_.add(slice, 0, contribution(0));
  owner_.add(slice, 1, contribution(1));
  host_.poll();
  ASSERT_EQ(results_.size(), 1u);
  EXPECT_EQ(contributors_, 6u);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(results_[0][i]), std::bit_cast<uint32_t>(want[i])) << i;
  EXPECT_EQ(owner_.pending(), 0u);
}

TEST_F(OwnerSideTest, ARefusedContributionIsDroppedAndItsRankMaySendAgain) {
  const OwnerSide::Slice slice{1, 5, 0, 4};
  owner_.add(slice, 0, contribution(0));
  auto bad = std::make_shared<std::vector<std::byte>>(12);  // 3 floats for a slice of 1000
  owner_.add(slice, 1, {bad, *bad, false, 2});
  owner_.add(slice, 2, contribution(2));
  host_.poll();
  ASSERT_EQ(refused_.size(), 1u);
  EXPECT_NE(refused_[0].find("contribution from rank 1 for tensor 5 slice 0 rejected: "), std::string::npos)
      << refused_[0];
  EXPECT_TRUE(results_.empty());
  owner_.add(slice, 1, contribution(1));  // sent again, whole
  host_.poll();
  ASSERT_EQ(results_.size(), 1u);
  EXPECT_FLOAT_EQ(results_[0][0], 0.1f + 0.2f + 0.3f);
  owner_.add(slice, 0, contribution(0));
  host_.poll();
  EXPECT_EQ(owner_.pending(), 1u) << "iteration 4's slice is done: this begins a new sum";
  owner_.dropSums(1, 5, 4);
  EXPECT_EQ(owner_.pending(), 0u);
}

TEST_F(OwnerSideTest, ASecondContributionFromOneRankIsRefused) {
  const OwnerSide::Slice slice{1, 5, 0, 4};
  owner_.add(slice, 1, contribution(1));
  owner_.add(slice, 1, contribution(1));
  ASSERT_EQ(refused_.size(), 1u);
  EXPECT_EQ(refused_[0], "tensor 5 slice 0 iteration 4: second contribution from rank 1 dropped");
}

}  // namespace
}  // namespace gcagent::agent

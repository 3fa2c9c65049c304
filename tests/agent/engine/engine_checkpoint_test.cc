// Residuals in checkpoints: a job stopped after some steps, its every engine gone, and
// restarted from each node's exported state continues with the steps an uninterrupted run
// makes, bit for bit; restarted without the state it does not (the test can fail).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "agent/engine/residual_state.h"
#include "tests/agent/engine/engine_runs.h"

namespace gcagent::agent {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kLocal = 2;
const std::vector<uint64_t> kSizes = {2500, 700};  // 3 slices and 1 of 1000: owners spread

struct Case {
  std::string name;
  compress::CodecSpec codec;
  ReductionPolicy policy;
  bool staged = false;  // every node's side and owner side on a coder that stages as a GPU's
};

ReductionPolicy ring() {
  ReductionPolicy p;
  p.topology = Topology::kRing;
  return p;
}

ReductionPolicy mxnet() {
  ReductionPolicy p;
  p.aggregation = Aggregation::kMxnet;
  return p;
}

std::vector<Case> cases() {
  return {
      {"mx2bit_ps", {"2bit", {{"threshold", "0.25"}}}, {}},
      {"mx2bit_mxnet", {"2bit", {{"threshold", "0.25"}}}, mxnet()},
      {"onebit_ring", {"onebit", {}}, ring()},
      {"dgc_warmup", {"dgc", {{"ratio", "0.05"}, {"warmup_steps", "4"}}}, {}},
      {"onebit_staged", {"onebit", {}}, {}, true},
  };
}

class Checkpoint : public ::testing::TestWithParam<Case> {};

std::unique_ptr<Cluster> cluster(uint32_t nodes, const Case& c) {
  return std::make_unique<Cluster>(nodes, smallSlices(), std::vector<bool>(nodes, c.staged), c.staged);
}

// Every key's state on every node: state[node][key index].
using States = std::vector<std::vector<std::vector<std::byte>>>;

States exportAll(Cluster& c, uint64_t job) {
  States out(c.size());
  for (uint32_t r = 0; r < c.size(); ++r)
    for (size_t k = 0; k < kSizes.size(); ++k) {
      std::optional<Result<std::vector<std::byte>>> got;
      c.engine(r).exportState(job, 100 + k, [&](Result<std::vector<std::byte>> blob) { got = std::move(blob); });
      c.pump();
      EXPECT_TRUE(got.has_value()) << "node " << r << " key " << k;
      if (!got) return {};
      EXPECT_TRUE(got->ok()) << got->status().toString();
      out[r].push_back(got->ok() ? **got : std::vector<std::byte>{});
    }
  return out;
}

Seen resumed(const Case& param, int first, int last, const States* states) {
  auto c = cluster(3, param);
  const uint64_t job = jobIdOf("policy-job");
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_TRUE(c->engine(r).declareJob(job, specsOf(kSizes, param.codec, param.policy)).ok());
    for (size_t k = 0; states != nullptr && k < kSizes.size(); ++k) {
      uint32_t dropped = 7;
      EXPECT_TRUE(c->engine(r).importState(job, 100 + k, (*states)[r][k], &dropped).ok());
      EXPECT_EQ(dropped, 0u);
    }
  }
  Seen seen;
  runIterations(*c, job, kLocal, kSizes, first, last, seen);
  return seen;
}

TEST_P(Checkpoint, ARestartFromTheStateMakesTheUninterruptedStepsBitForBit) {
  const Case& param = GetParam();
  const Seen whole = [&] {
    auto c = cluster(3, param);
    return runPolicy(*c, kLocal, kSizes, 8, param.codec, param.policy);
  }();
  States saved;
  {
    auto c = cluster(3, param);
    runPolicy(*c, kLocal, kSizes, 4, param.codec, param.policy);
    saved = exportAll(*c, jobIdOf("policy-job"));
    ASSERT_EQ(saved.size(), 3u);
    // Every node owes something after four compressed steps, and owns residuals of results.
    for (uint32_t r = 0; r < 3; ++r) {
      auto state = decodeResidualState(saved[r][0]);
      ASSERT_TRUE(state.ok()) << state.status().toString();
      bool node = false, owner = false;
      for (const ResidualPart& p : state->parts) (p.kind == ResidualKind::kNode ? node : owner) = true;
      EXPECT_TRUE(node) << "node " << r;
      if (param.policy.aggregation != Aggregation::kMxnet) {
        EXPECT_TRUE(owner) << "node " << r;
      }
    }
  }  // every engine is gone
  const Seen restarted = resumed(param, 5, 8, &saved);
  const Seen forgot = resumed(param, 5, 8, nullptr);
  ASSERT_EQ(restarted.size(), 4u);
  bool differs = false;
  for (int i = 0; i < 4; ++i)
    for (uint32_t r = 0; r < 3; ++r)
      for (uint32_t l = 0; l < kLocal; ++l)
        for (size_t k = 0; k < kSizes.size(); ++k) {
          ASSERT_EQ(restarted[i][r][l][k], whole[4 + i][r][l][k])
              << "iteration " << 5 + i << " node " << r << " trainer " << l << " key " << k;
          differs |= forgot[i][r][l][k] != whole[4 + i][r][l][k];
        }
  EXPECT_TRUE(differs) << "a restart without the residuals must not match: the check would pass anyway";
}

INSTANTIATE_TEST_SUITE_P(Codecs, Checkpoint, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(CheckpointState, AStateOfAnotherDeclarationIsRefusedNamingWhatDiffers) {
  const Case twobit{"", {"2bit", {{"threshold", "0.25"}}}, {}};
  auto c = cluster(3, twobit);
  runPolicy(*c, kLocal, kSizes, 2, twobit.codec, twobit.policy);
  const States saved = exportAll(*c, jobIdOf("policy-job"));
  ASSERT_EQ(saved.size(), 3u);
  auto other = cluster(3, twobit);
  const uint64_t job = jobIdOf("policy-job");
  auto refusal = [&](std::vector<TensorSpec> specs, const std::vector<std::byte>& blob, uint64_t key = 100) {
    EXPECT_TRUE(other->engine(0).declareJob(job, specs).ok());
    uint32_t dropped = 0;
    return other->engine(0).importState(job, key, blob, &dropped).message();
  };
  EXPECT_THAT(refusal(specsOf(kSizes, {"2bit", {{"threshold", "0.5"}}}, {}), saved[0][0]),
              HasSubstr("tensor 100: the error-feedback state does not fit: it is of codecs 2bit/2bit; the tensor is "
                        "declared with 2bit/2bit (a codec or one of its parameters differs)"));
  EXPECT_THAT(refusal(specsOf(kSizes, {"onebit", {}}, {}), saved[0][0]), HasSubstr("codecs 2bit/2bit"));
  EXPECT_THAT(refusal(specsOf({2400, 700}, twobit.codec, {}), saved[0][0]),
              HasSubstr("it is of 2500 elements; the tensor has 2400"));
  EXPECT_THAT(refusal(specsOf(kSizes, twobit.codec, {}), saved[0][1]), HasSubstr("it is tensor 101's"));
  auto truncated = saved[0][0];
  truncated.resize(truncated.size() - 3);
  EXPECT_THAT(refusal(specsOf(kSizes, twobit.codec, {}), truncated), HasSubstr("error-feedback state: truncated"));
  auto garbage = saved[0][0];
  garbage[0] = std::byte{0};
  EXPECT_THAT(refusal(specsOf(kSizes, twobit.codec, {}), garbage), HasSubstr("not a gcagent state (bad magic)"));
  EXPECT_THAT(refusal(specsOf(kSizes, twobit.codec, {}), saved[0][0], 999), HasSubstr("tensor 999 is not declared"));
}

TEST(CheckpointState, ReadAndWrittenOnlyBetweenSteps) {
  const Case twobit{"", {"2bit", {{"threshold", "0.25"}}}, {}};
  std::vector<float> a(2500, 0.5f), b(2500, 0.5f);  // outlive the cluster: its coder's work writes them
  auto c = cluster(2, twobit);
  const uint64_t job = jobIdOf("policy-job");
  for (uint32_t r = 0; r < 2; ++r) ASSERT_TRUE(c->engine(r).declareJob(job, specsOf(kSizes, twobit.codec, {})).ok());
  ASSERT_TRUE(c->engine(0).reduce(job, 1, 100, {a.data(), b.data()}).ok());  // node 1 never joins
  std::optional<Status> got;
  c->engine(0).exportState(job, 100, [&](Result<std::vector<std::byte>> r) { got = r.status(); });
  ASSERT_TRUE(got.has_value());
  EXPECT_THAT(got->message(), HasSubstr("tensor 100 is reducing iteration 1: read its error-feedback state between steps"));
  uint32_t dropped = 0;
  EXPECT_THAT(c->engine(0).importState(job, 100, {}, &dropped).message(),
              HasSubstr("put its error-feedback state back before its first step"));
}

TEST(CheckpointState, OwnerPartsOfAnotherLayoutAreLeftOutAndTheNodesPartsApply) {
  const Case twobit{"", {"2bit", {{"threshold", "0.25"}}}, {}};
  auto c = cluster(3, twobit);
  runPolicy(*c, kLocal, kSizes, 3, twobit.codec, twobit.policy);
  const States saved = exportAll(*c, jobIdOf("policy-job"));
  ASSERT_EQ(saved.size(), 3u);
  auto state = decodeResidualState(saved[1][0]);
  ASSERT_TRUE(state.ok());
  uint32_t owner_parts = 0;
  for (const ResidualPart& p : state->parts) owner_parts += p.kind != ResidualKind::kNode;
  ASSERT_GT(owner_parts, 0u);
  // Two nodes now: node 1 owns other slices, so its owner parts cannot apply.
  auto two = cluster(2, twobit);
  const uint64_t job = jobIdOf("policy-job");
  ASSERT_TRUE(two->engine(1).declareJob(job, specsOf(kSizes, twobit.codec, {})).ok());
  uint32_t dropped = 0;
  ASSERT_TRUE(two->engine(1).importState(job, 100, saved[1][0], &dropped).ok());
  EXPECT_EQ(dropped, owner_parts);
  // Another local trainer's declaration of the same tensors keeps what was put back.
  ASSERT_TRUE(two->engine(1).declareJob(job, specsOf(kSizes, twobit.codec, {})).ok());
  // What applied is the node's side alone: read back, it is exactly those parts.
  std::optional<Result<std::vector<std::byte>>> back;
  two->engine(1).exportState(job, 100, [&](Result<std::vector<std::byte>> r) { back = std::move(r); });
  two->pump();
  ASSERT_TRUE(back && back->ok());
  auto reread = decodeResidualState(**back);
  ASSERT_TRUE(reread.ok());
  std::vector<ResidualPart> node_parts;
  for (const ResidualPart& p : state->parts)
    if (p.kind == ResidualKind::kNode) node_parts.push_back(p);
  EXPECT_EQ(reread->parts, node_parts);
  EXPECT_EQ(reread->layout.node_count, 2u);
}

}  // namespace
}  // namespace gcagent::agent

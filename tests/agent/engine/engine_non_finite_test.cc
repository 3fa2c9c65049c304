// fp16 mixed precision's overflow steps: an inf or a NaN in one node's gradient reaches every
// node's result as DDP's sum carries it (GradScaler then skips the step and lowers its
// scale), the step completes, and no residual keeps it: the slice that held it travels raw,
// its residuals untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include "agent/engine/residual_state.h"
#include "tests/agent/engine/engine_cluster.h"
#include "tests/agent/engine/engine_runs.h"

namespace gcagent::agent {
namespace {

constexpr uint64_t kKey = 5, kElements = 4000;
constexpr size_t kBad = 1234;  // in slice 1 of 1000-element slices

struct Case {
  const char* codec;
  Topology topology;
  float bad;
  bool coded = false;  // every node's side on a coder that stages as a GPU's (two-phase encode)
};

std::string nameOf(const testing::TestParamInfo<Case>& info) {
  std::string codec = info.param.codec;
  for (char& ch : codec) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return codec + "_" + std::string(topologyName(info.param.topology)) + (std::isnan(info.param.bad) ? "_nan" : "_inf") +
         (info.param.coded ? "_coded" : "");
}

class NonFiniteTest : public testing::TestWithParam<Case> {};

// Every node's residual state of the tensor, as a checkpoint would hold it.
std::vector<ResidualState> statesOf(Cluster& c, uint64_t job) {
  std::vector<ResidualState> out;
  for (uint32_t r = 0; r < c.size(); ++r) {
    std::optional<Result<std::vector<std::byte>>> got;
    c.engine(r).exportState(job, kKey, [&](Result<std::vector<std::byte>> blob) { got = std::move(blob); });
    c.pump();
    EXPECT_TRUE(got && got->ok());
    auto state = decodeResidualState(**got);
    EXPECT_TRUE(state.ok()) << state.status().toString();
    out.push_back(state.ok() ? *state : ResidualState{});
  }
  return out;
}

TEST_P(NonFiniteTest, AnOverflowStepReachesEveryNodeAndNoResidualKeepsIt) {
  const Case& p = GetParam();
  EngineOptions o = smallSlices();
  o.default_codec = {p.codec, {}};
  o.min_elements = 0;
  o.topology = p.topology;
  Cluster c(3, o, std::vector<bool>(3, p.coded));
  const uint64_t job = jobIdOf("overflow");
  for (uint32_t r = 0; r < 3; ++r) ASSERT_TRUE(c.engine(r).declareJob(job, {{kKey, kElements, 0, {}, {}}}).ok());
  auto gradient = [](uint32_t r, uint64_t step) {
    std::vector<float> g(kElements);
    for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>((i * 7 + r * 3 + step) % 11) - 0.05f;
    return g;
  };
  std::vector<std::vector<float>> g(3);
  for (uint32_t r = 0; r < 3; ++r) g[r] = gradient(r, 1);
  g[0][kBad] = p.bad;
  for (uint32_t r = 0; r < 3; ++r) ASSERT_TRUE(c.engine(r).reduce(job, 1, kKey, {g[r].data()}, c.coder(r)).ok());
  c.pump();
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_EQ(c.done(r).size(), 1u) << "node " << r;
    ASSERT_TRUE(c.done(r)[0].status.ok()) << c.done(r)[0].status.toString();
    // As DDP's average: the non-finite element where it was, of the same kind; finite elsewhere.
    EXPECT_EQ(std::isnan(g[r][kBad]), std::isnan(p.bad)) << "node " << r << " got " << g[r][kBad];
    EXPECT_FALSE(std::isfinite(g[r][kBad])) << "node " << r << ": the overflow was hidden";
    for (size_t i = 0; i < kElements; ++i) {
      if (i == kBad) continue;
      ASSERT_TRUE(std::isfinite(g[r][i])) << "node " << r << " element " << i;
    }
  }
  double counted = 0;
  for (uint32_t r = 0; r < 3; ++r) counted += c.engine(r).stats().nonFiniteSlices().Value();
  if (std::string(p.codec) == "none") {
    EXPECT_EQ(counted, 0);
  } else {
    EXPECT_GE(counted, 1) << "the slices sent raw are counted";
  }
  // No residual holds it, and the slice's residuals on its way are as before the step (zero).
  const std::vector<ResidualState> states = statesOf(c, job);
  for (uint32_t r = 0; r < 3; ++r)
    for (const ResidualPart& part : states[r].parts) {
      for (float v : part.values) ASSERT_TRUE(std::isfinite(v)) << "node " << r << " slice " << part.slice;
      const bool untouched = part.slice == kBad / 1000 && (r == 0 || part.kind == ResidualKind::kResult);
      if (untouched) {
        for (float v : part.values) ASSERT_EQ(v, 0.0f) << "node " << r << " kind " << int(part.kind);
      }
    }
  // The next step is finite everywhere.
  for (uint32_t r = 0; r < 3; ++r) {
    g[r] = gradient(r, 2);
    ASSERT_TRUE(c.engine(r).reduce(job, 2, kKey, {g[r].data()}, c.coder(r)).ok());
  }
  c.pump();
  for (uint32_t r = 0; r < 3; ++r) {
    ASSERT_EQ(c.done(r).size(), 2u);
    ASSERT_TRUE(c.done(r)[1].status.ok()) << c.done(r)[1].status.toString();
    for (size_t i = 0; i < kElements; ++i) ASSERT_TRUE(std::isfinite(g[r][i])) << "node " << r << " element " << i;
  }
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

INSTANTIATE_TEST_SUITE_P(
    Codecs, NonFiniteTest,
    testing::Values(Case{"none", Topology::kPs, kInf}, Case{"2bit", Topology::kPs, kInf},
                    Case{"2bit", Topology::kPs, kNaN}, Case{"fp8", Topology::kPs, kInf},
                    Case{"int4", Topology::kPs, kNaN}, Case{"dgc", Topology::kPs, kInf},
                    Case{"onebit", Topology::kPs, kInf}, Case{"terngrad", Topology::kPs, kNaN},
                    Case{"2bit", Topology::kRing, kInf}, Case{"fp8", Topology::kRing, kNaN},
                    Case{"2bit", Topology::kAllgather, kInf}, Case{"dgc", Topology::kAllgather, kNaN},
                    Case{"2bit", Topology::kPs, kInf, true}, Case{"fp8", Topology::kRing, kNaN, true},
                    Case{"dgc", Topology::kPs, kNaN, true}),
    nameOf);

}  // namespace
}  // namespace gcagent::agent

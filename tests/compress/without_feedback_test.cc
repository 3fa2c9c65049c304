// error_feedback=false on the codecs whose quantizer always folds a residual in: no state,
// every step encodes the gradient alone (the plain quantizer), and the switch changes what
// a second step sends.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::bytes;
using testing::encode;
using testing::gaussian;
using testing::mustMake;

struct Case {
  std::string codec;
  Params params;  // without error_feedback
};

class WithoutFeedbackTest : public ::testing::TestWithParam<Case> {
 protected:
  std::unique_ptr<Codec> make(bool error_feedback) {
    Params p = GetParam().params;
    p["error_feedback"] = error_feedback ? "true" : "false";
    return mustMake(GetParam().codec, p);
  }
};

TEST_P(WithoutFeedbackTest, KeepsNoState) {
  auto off = make(false);
  ASSERT_NE(off, nullptr);
  EXPECT_EQ(off->name(), GetParam().codec);
  EXPECT_EQ(off->stateElements(4096), 0u);
  EXPECT_TRUE(off->residual({}, 4096).empty());
  EXPECT_GT(make(true)->stateElements(4096), 0u);
}

TEST_P(WithoutFeedbackTest, EveryStepIsThePlainQuantizerOfItsGradient) {
  auto off = make(false);
  auto on = make(true);
  ASSERT_NE(off, nullptr);
  for (size_t n : {size_t{1}, size_t{17}, size_t{4096}}) {
    const auto g = gaussian(n, 7 + n);
    const SliceId id{3, 0, 5};
    std::vector<float> none;
    const auto first = encode(*off, g, none, id);
    EXPECT_TRUE(none.empty());
    EXPECT_EQ(encode(*off, g, none, id), first) << "n=" << n << ": the first step leaked into the second";
    // The plain quantizer: the feedback codec's first step from a zeroed state.
    std::vector<float> state;
    EXPECT_EQ(encode(*on, g, state, id), first) << "n=" << n;
    if (n == 4096) {
      EXPECT_NE(encode(*on, g, state, id), first) << "with feedback the second step must differ";
    }
  }
}

TEST_P(WithoutFeedbackTest, PoolSplitGivesTheSameBytes) {
  ThreadPool pool(3);
  CodecEnv env{&pool, 1024};
  Params p = GetParam().params;
  p["error_feedback"] = "false";
  auto split = mustMake(GetParam().codec, p, env);
  auto serial = make(false);
  const auto g = gaussian(100003, 42);
  std::vector<float> a, b;
  EXPECT_EQ(encode(*split, g, a, {1, 2, 3}), encode(*serial, g, b, {1, 2, 3}));
}

TEST_P(WithoutFeedbackTest, RefusesANonBoolean) {
  testing::expectBadParams(GetParam().codec, {{"error_feedback", "maybe"}});
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, WithoutFeedbackTest,
    ::testing::Values(Case{"2bit", {{"threshold", "0.5"}}}, Case{"1bit", {}}, Case{"onebit", {}},
                      Case{"topk", {{"ratio", "0.1"}}}, Case{"dgc", {{"ratio", "0.1"}, {"warmup_steps", "0"}}},
                      Case{"threshold", {{"drop", "0.9"}}}),
    [](const auto& info) { return info.param.codec == "2bit" ? std::string("mx2bit")
                                  : info.param.codec == "1bit" ? std::string("mx1bit")
                                                               : info.param.codec; });

// The golden gradient of DESIGN.md section 4: without feedback both steps send step 1's bytes.
TEST(WithoutFeedbackGoldenTest, Mx2bitSendsStepOneBytesEveryStep) {
  const std::vector<float> g = {0.75f, -0.5f, 0.25f,   -0.25f, 0.5f, -1.0f, 0.125f, 0.0f, 1.5f,
                                -0.75f, 0.375f, 0.25f, -0.375f, 0.0f, 0.0f,  2.0f,  0.25f};
  auto codec = mustMake("2bit", {{"threshold", "0.5"}, {"error_feedback", "false"}});
  std::vector<float> state;
  for (int step = 0; step < 2; ++step)
    EXPECT_EQ(encode(*codec, g, state), bytes({0xe0, 0xe0, 0xe0, 0x03, 0, 0, 0, 0})) << step;
}

}  // namespace
}  // namespace gcagent::compress

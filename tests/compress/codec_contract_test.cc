// The contract every registered codec keeps, run over the whole registry: sizes, linearity
// of decodeAdd, determinism, the error-feedback identity, and rejection of truncated and
// corrupted buffers without touching the accumulator. Codec-specific error bounds live in
// each codec's own test.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using testing::gaussian;
using testing::kSizes;

// Parameters under which a codec's state is a pure error-feedback residual, so that the
// identity sum(decoded) + residual == sum(inputs) holds exactly (up to fp32 rounding).
const std::map<std::string, Params> kErrorFeedbackParams = {
    {"fp16", {{"error_feedback", "true"}}},
    {"bf16", {{"error_feedback", "true"}}},
    {"terngrad", {{"error_feedback", "true"}}},
    {"qsgd", {{"error_feedback", "true"}}},
    {"int8", {}},
    {"randomk", {{"error_feedback", "true"}}},
    {"dgc", {{"momentum", "0"}}},
};

std::vector<std::string> allCodecs() {
  std::vector<std::string> names;
  for (const auto& info : codecList()) names.emplace_back(info.name);
  return names;
}

class CodecContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::unique_ptr<Codec> make(const Params& params = {}, const CodecEnv& env = {}) {
    return testing::mustMake(GetParam(), params, env);
  }
};

TEST_P(CodecContractTest, EncodedSizeMatchesReportAtEverySize) {
  auto codec = make();
  ASSERT_NE(codec, nullptr);
  EXPECT_EQ(codec->name(), GetParam());
  for (size_t n : kSizes) {
    auto g = gaussian(n, 11 + n);
    std::vector<float> state(codec->stateElements(n), 0.0f);
    std::vector<std::byte> out(codec->maxEncodedBytes(n) + 64, std::byte{0x5a});
    auto written = codec->encode(g, state, std::span(out).first(codec->maxEncodedBytes(n)), {});
    ASSERT_TRUE(written.ok()) << "n=" << n << " " << written.status().toString();
    if (codec->isFixedSize()) {
      EXPECT_EQ(*written, codec->maxEncodedBytes(n)) << "n=" << n;
    }
    EXPECT_LE(*written, codec->maxEncodedBytes(n)) << "n=" << n;
    for (size_t i = codec->maxEncodedBytes(n); i < out.size(); ++i)
      ASSERT_EQ(out[i], std::byte{0x5a}) << "wrote past the reported size, n=" << n;
  }
}

TEST_P(CodecContractTest, DecodeAddAddsToTheAccumulator) {
  auto codec = make();
  ASSERT_NE(codec, nullptr);
  for (size_t n : kSizes) {
    auto g = gaussian(n, 3 + n);
    std::vector<float> state;
    auto bytes = testing::encode(*codec, g, state, {7, 1, 2});
    auto decoded = testing::decode(*codec, bytes, n, {7, 1, 2});
    auto acc = gaussian(n, 5 + n);
    auto expected = acc;
    ASSERT_TRUE(codec->decodeAdd(bytes, acc, {7, 1, 2}).ok());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], expected[i] + decoded[i]) << "n=" << n << " i=" << i;
  }
}

// -0.0 is the identity of fp32 addition: a sum that starts with a decode is the sum of the
// contributions, -0.0 included.
TEST_P(CodecContractTest, DecodeOverwritesWithWhatDecodeAddAddsToNegativeZeroScaled) {
  for (const Params& params : {Params{}, Params{{"error_feedback", "false"}}}) {
    auto codec = makeCodec(GetParam(), params);
    if (!codec.ok()) continue;  // codecs without the parameter
    for (const float scale : {1.0f, 1.0f / 3.0f, 0.25f}) {
      for (size_t n : kSizes) {
        auto g = gaussian(n, 13 + n);
        std::vector<float> state;
        auto bytes = testing::encode(**codec, g, state, {7, 1, 2});
        std::vector<float> expected(n, -0.0f);
        ASSERT_TRUE((*codec)->decodeAdd(bytes, expected, {7, 1, 2}).ok());
        for (float& v : expected) v *= scale;
        std::vector<float> out(n, std::nanf(""));
        ASSERT_TRUE((*codec)->decode(bytes, out, scale, {7, 1, 2}).ok());
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(expected[i]))
              << "n=" << n << " i=" << i << " scale " << scale;
        if (!bytes.empty()) {
          EXPECT_FALSE((*codec)->decode(std::span(bytes).first(bytes.size() - 1), out, scale, {7, 1, 2}).ok())
              << "n=" << n << ": a truncated buffer must be refused";
        }
      }
    }
  }
}

TEST_P(CodecContractTest, EncodingIsDeterministic) {
  auto codec = make();
  ASSERT_NE(codec, nullptr);
  const size_t n = 4096;
  auto g = gaussian(n, 99);
  std::vector<float> s1, s2;
  auto a = testing::encode(*codec, g, s1, {1, 2, 3});
  auto b = testing::encode(*codec, g, s2, {1, 2, 3});
  EXPECT_EQ(a, b);
  EXPECT_EQ(s1, s2);
}

TEST_P(CodecContractTest, PoolSplitGivesTheSameBytesAsOneThread) {
  ThreadPool pool(3);
  CodecEnv split{&pool, 1024};
  auto serial = make();
  auto parallel = make({}, split);
  ASSERT_NE(serial, nullptr);
  const size_t n = (1u << 16) + 5;
  std::vector<float> s1, s2;
  for (int step = 0; step < 3; ++step) {
    auto g = gaussian(n, 50 + step);
    auto a = testing::encode(*serial, g, s1, {4, 0, static_cast<uint64_t>(step)});
    auto b = testing::encode(*parallel, g, s2, {4, 0, static_cast<uint64_t>(step)});
    ASSERT_EQ(a, b) << "step " << step;
    ASSERT_EQ(s1, s2) << "step " << step;
    EXPECT_EQ(testing::decode(*serial, a, n), testing::decode(*parallel, b, n));
  }
}

TEST_P(CodecContractTest, ErrorFeedbackKeepsEverythingOwed) {
  auto it = kErrorFeedbackParams.find(GetParam());
  auto codec = make(it == kErrorFeedbackParams.end() ? Params{} : it->second);
  ASSERT_NE(codec, nullptr);
  const size_t n = 4097;
  if (codec->stateElements(n) == 0) GTEST_SKIP() << GetParam() << " keeps no residual";
  const int steps = 20;
  std::vector<double> sent(n, 0.0), given(n, 0.0);
  std::vector<float> state;
  for (int t = 0; t < steps; ++t) {
    auto g = gaussian(n, 1000 + t, 0.3f);
    for (size_t i = 0; i < n; ++i) given[i] += g[i];
    auto bytes = testing::encode(*codec, g, state, {5, 0, static_cast<uint64_t>(t)});
    auto d = testing::decode(*codec, bytes, n, {5, 0, static_cast<uint64_t>(t)});
    for (size_t i = 0; i < n; ++i) sent[i] += d[i];
  }
  auto residual = codec->residual(state, n);
  ASSERT_EQ(residual.size(), n);
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    // fp32 residual arithmetic: a few ulps of the largest magnitude involved per step.
    double scale = 1.0 + std::abs(given[i]) + std::abs(sent[i]);
    worst = std::max(worst, std::abs(sent[i] + residual[i] - given[i]) / scale);
  }
  EXPECT_LT(worst, 1e-5) << GetParam();
}

TEST_P(CodecContractTest, TruncatedOrOversizedBuffersAreRejectedUntouched) {
  auto codec = make();
  ASSERT_NE(codec, nullptr);
  for (size_t n : {size_t{1}, size_t{17}, size_t{4096}}) {
    auto g = gaussian(n, 77 + n);
    std::vector<float> state;
    auto bytes = testing::encode(*codec, g, state);
    auto acc = gaussian(n, 78);
    const auto before = acc;
    for (size_t len = 0; len < bytes.size(); len += (len < 64 ? 1 : 61)) {
      Status s = codec->decodeAdd(std::span(bytes).first(len), acc, {});
      ASSERT_FALSE(s.ok()) << "n=" << n << " accepted a " << len << "-byte prefix of " << bytes.size();
      EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.toString();
      EXPECT_NE(s.message().find(GetParam()), std::string::npos) << "error must name the codec: " << s.message();
    }
    auto longer = bytes;
    longer.resize(bytes.size() + 4);
    EXPECT_FALSE(codec->decodeAdd(longer, acc, {}).ok()) << "n=" << n;
    ASSERT_EQ(acc, before) << "a rejected buffer changed the accumulator";
  }
}

TEST_P(CodecContractTest, CorruptedBuffersNeverReadOutOfBounds) {
  auto codec = make();
  ASSERT_NE(codec, nullptr);
  const size_t n = 1000;
  auto g = gaussian(n, 1);
  std::vector<float> state;
  auto bytes = testing::encode(*codec, g, state);
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    auto bad = bytes;
    if (bad.empty()) break;
    for (int k = 0; k < 1 + trial % 4; ++k)
      bad[rng() % bad.size()] = static_cast<std::byte>(rng());
    std::vector<float> acc(n, 1.0f);
    Status s = codec->decodeAdd(bad, acc, {});
    if (!s.ok()) {
      EXPECT_EQ(acc, std::vector<float>(n, 1.0f)) << "rejected buffer changed the accumulator";
    }
  }
}

TEST_P(CodecContractTest, UnknownParameterIsNamed) {
  auto codec = makeCodec(GetParam(), {{"no_such_key", "1"}});
  ASSERT_FALSE(codec.ok());
  EXPECT_EQ(codec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(codec.status().message().find("no_such_key"), std::string::npos);
  EXPECT_NE(codec.status().message().find(GetParam()), std::string::npos);
}

TEST_P(CodecContractTest, SmallSpansAreRejected) {
  auto codec = make();
  ASSERT_NE(codec, nullptr);
  const size_t n = 64;
  auto g = gaussian(n, 2);
  std::vector<float> state(codec->stateElements(n));
  std::vector<std::byte> out(codec->maxEncodedBytes(n));
  auto r = codec->encode(g, state, std::span(out).first(out.size() - 1), {});
  EXPECT_FALSE(r.ok());
  if (!state.empty()) {
    auto r2 = codec->encode(g, std::span(state).first(state.size() - 1), out, {});
    EXPECT_FALSE(r2.ok());
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecContractTest, ::testing::ValuesIn(allCodecs()),
                         [](const auto& info) {
                           std::string s = info.param;
                           if (!s.empty() && std::isdigit(static_cast<unsigned char>(s[0]))) s = "mx" + s;
                           return s;
                         });

}  // namespace
}  // namespace gcagent::compress

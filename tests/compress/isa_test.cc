// Run-time ISA selection, and the AVX2 loops against the generic ones bit for bit, through
// the codecs themselves: encoded bytes and residuals over several steps, and decodeAdd.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "compress/cpu/isa.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

using cpu::Isa;

// Puts back the ISA active when it was made, so tests can switch freely.
class IsaScope {
 public:
  IsaScope() : saved_(cpu::activeIsa()) {}
  ~IsaScope() { EXPECT_TRUE(cpu::setActiveIsa(saved_).ok()); }

 private:
  Isa saved_;
};

#define SKIP_WITHOUT_AVX2()          \
  if (!cpu::cpuSupports(Isa::kAvx2)) \
  GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C: only the generic loops can run here"

TEST(IsaTest, NamesRoundTrip) {
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2}) {
    auto parsed = cpu::parseIsa(cpu::isaName(isa));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, isa);
  }
  EXPECT_FALSE(cpu::parseIsa("sse9").ok());
}

TEST(IsaTest, RequestSelectsTheIsa) {
  EXPECT_EQ(*cpu::isaForRequest(nullptr, true), Isa::kAvx2);
  EXPECT_EQ(*cpu::isaForRequest(nullptr, false), Isa::kGeneric);
  EXPECT_EQ(*cpu::isaForRequest("", true), Isa::kAvx2);
  EXPECT_EQ(*cpu::isaForRequest("generic", true), Isa::kGeneric);
  EXPECT_EQ(*cpu::isaForRequest("avx2", true), Isa::kAvx2);
}

TEST(IsaTest, ImpossibleRequestsAreExplained) {
  auto refused = cpu::isaForRequest("avx2", false);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("AVX2"), std::string::npos)
      << refused.status().message();
  auto unknown = cpu::isaForRequest("sse9", true);
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("sse9"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("GCAGENT_CPU_ISA"), std::string::npos);
}

// ctest runs every test in its own process, once as is and once with GCAGENT_CPU_ISA=generic.
TEST(IsaTest, StartsWithWhatTheEnvironmentAsks) {
  auto requested = cpu::isaForRequest(std::getenv("GCAGENT_CPU_ISA"), cpu::cpuSupports(Isa::kAvx2));
  EXPECT_EQ(cpu::activeIsa(), requested.ok() ? *requested : cpu::bestIsa());
}

TEST(IsaTest, SwitchesOnlyToSupportedIsas) {
  IsaScope scope;
  EXPECT_TRUE(cpu::setActiveIsa(Isa::kGeneric).ok());
  EXPECT_EQ(cpu::activeIsa(), Isa::kGeneric);
  Status avx2 = cpu::setActiveIsa(Isa::kAvx2);
  EXPECT_EQ(avx2.ok(), cpu::cpuSupports(Isa::kAvx2)) << avx2.toString();
  EXPECT_EQ(cpu::activeIsa(), avx2.ok() ? Isa::kAvx2 : Isa::kGeneric);
}

// ---- Bit-exactness.

// Equal bits, except that any two NaNs are equal: NaN payloads after an fp32 addition
// depend on operand order, which the compiler may pick differently per loop.
::testing::AssertionResult sameFloats(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], 4) != 0)
      return ::testing::AssertionFailure() << "element " << i << " of " << a.size() << ": " << a[i]
                                           << " (generic) vs " << b[i] << " (avx2)";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult sameBytes(const std::vector<std::byte>& a,
                                     const std::vector<std::byte>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " and " << b.size();
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      return ::testing::AssertionFailure()
             << "byte " << i << " of " << a.size() << ": 0x" << std::hex << int(a[i])
             << " (generic) vs 0x" << int(b[i]) << " (avx2)";
  return ::testing::AssertionSuccess();
}

// Gradients that probe the edges: gaussians, multiples of t/4 (so residual sums land on
// exactly +-t), +-t itself, signed zeros, subnormals and large values.
std::vector<float> edgyGradient(size_t n, uint64_t seed, float t) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 0.5f);
  std::uniform_int_distribution<int> pick(0, 9), quarter(-8, 8);
  std::vector<float> g(n);
  for (auto& x : g) {
    switch (pick(rng)) {
      case 0: x = t; break;
      case 1: x = -t; break;
      case 2: x = quarter(rng) * (t / 4); break;
      case 3: x = (rng() & 1) ? 0.0f : -0.0f; break;
      case 4: x = std::ldexp(gauss(rng), -130); break;  // subnormal
      case 5: x = gauss(rng) * 1e4f; break;
      default: x = gauss(rng); break;
    }
  }
  return g;
}

// An accumulator with signed zeros among ordinary values (x + 0 turns -0 into +0).
std::vector<float> edgyAccumulator(size_t n, uint64_t seed) {
  auto acc = testing::gaussian(n, seed);
  for (size_t i = 0; i < n; i += 3) acc[i] = (i % 2) ? 0.0f : -0.0f;
  return acc;
}

struct Case {
  std::string label;
  std::string codec;
  Params params;
  float t;  // the threshold the gradients probe
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

std::vector<Case> cases() {
  return {
      {"none", "none", {}, 1.0f},
      {"fp16", "fp16", {}, 1.0f},
      {"fp16_ef", "fp16", {{"error_feedback", "true"}}, 1.0f},
      {"bf16", "bf16", {}, 1.0f},
      {"bf16_ef", "bf16", {{"error_feedback", "true"}}, 1.0f},
      {"mx2bit_t05", "2bit", {{"threshold", "0.5"}}, 0.5f},
      {"mx2bit_t3", "2bit", {{"threshold", "3"}}, 3.0f},
      {"mx1bit_t0", "1bit", {{"threshold", "0"}}, 0.0f},
      {"mx1bit_t025", "1bit", {{"threshold", "0.25"}}, 0.25f},
      {"mx1bit_tneg", "1bit", {{"threshold", "-0.5"}}, -0.5f},
      // The scaled, stochastic and block-scaled definitions (t: only the gradients' scale).
      {"onebit", "onebit", {}, 1.0f},
      {"onebit_unscaled", "onebit", {{"scaled", "false"}}, 1.0f},
      {"terngrad_ef", "terngrad", {{"error_feedback", "true"}}, 1.0f},
      {"fp8", "fp8", {}, 1.0f},
      {"fp8_e5m2", "fp8", {{"exponent_bits", "5"}, {"block", "256"}}, 1.0f},
      {"int4_rotated_stochastic", "int4", {{"rotate", "true"}, {"stochastic", "true"}}, 1.0f},
      {"mxfp4", "mxfp4", {}, 1.0f},
  };
}

std::vector<size_t> sizes() {
  std::vector<size_t> out;
  for (size_t n = 0; n <= 100; ++n) out.push_back(n);
  for (size_t n : {127, 128, 129, 1000, 4096 + 13, (1 << 16) + 5, (1 << 20) + 3}) out.push_back(n);
  return out;
}

class IsaExactTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_AVX2();
    codec_ = testing::mustMake(GetParam().codec, GetParam().params);
    ASSERT_NE(codec_, nullptr);
  }

  // One encode under `isa`.
  std::vector<std::byte> encodeWith(Isa isa, const Codec& codec, std::span<const float> g,
                                    std::vector<float>& state) {
    EXPECT_TRUE(cpu::setActiveIsa(isa).ok());
    return testing::encode(codec, g, state);
  }

  // acc after a decodeAdd under `isa`, or (acc untouched) the codec's refusal.
  struct Decoded {
    std::string refusal;
    std::vector<float> acc;
  };
  Decoded decodeAddWith(Isa isa, std::span<const std::byte> bytes, std::vector<float> acc) {
    EXPECT_TRUE(cpu::setActiveIsa(isa).ok());
    Status s = codec_->decodeAdd(bytes, acc, {});
    return {s.ok() ? "" : s.toString(), std::move(acc)};
  }

  // Both ISAs decode `bytes` to the same bits, or refuse them in the same words.
  ::testing::AssertionResult decodeAlike(std::span<const std::byte> bytes, const std::vector<float>& acc) {
    const Decoded a = decodeAddWith(Isa::kGeneric, bytes, acc), b = decodeAddWith(Isa::kAvx2, bytes, acc);
    if (a.refusal != b.refusal)
      return ::testing::AssertionFailure() << "generic: '" << a.refusal << "', avx2: '" << b.refusal << "'";
    return sameFloats(a.acc, b.acc);
  }

  IsaScope scope_;
  std::unique_ptr<Codec> codec_;
};

TEST_P(IsaExactTest, EncodeStepsMatchGeneric) {
  const int kSteps = 4;  // the residual carries over, reaching +-t from both sides
  for (size_t n : sizes()) {
    std::vector<float> s_generic, s_avx2;
    for (int step = 0; step < kSteps; ++step) {
      auto g = edgyGradient(n, 1000 * n + step, GetParam().t);
      auto a = encodeWith(Isa::kGeneric, *codec_, g, s_generic);
      auto b = encodeWith(Isa::kAvx2, *codec_, g, s_avx2);
      ASSERT_TRUE(sameBytes(a, b)) << "n=" << n << " step " << step;
      ASSERT_TRUE(sameFloats(s_generic, s_avx2)) << "residual, n=" << n << " step " << step;
    }
  }
}

TEST_P(IsaExactTest, DecodeAddMatchesGeneric) {
  for (size_t n : sizes()) {
    std::vector<float> state;
    auto bytes = encodeWith(Isa::kGeneric, *codec_, edgyGradient(n, n + 7, GetParam().t), state);
    const auto acc = edgyAccumulator(n, n + 8);
    EXPECT_EQ(decodeAddWith(Isa::kGeneric, bytes, acc).refusal, "") << "n=" << n;
    EXPECT_TRUE(decodeAlike(bytes, acc)) << "n=" << n;
  }
}

// Any byte pattern of the right length decodes alike (2-bit code 01, fp16 NaNs and
// infinities, fp8's codes), or is refused alike (a bad scale, a code never written, padding).
TEST_P(IsaExactTest, ArbitraryBytesDecodeAlike) {
  std::mt19937_64 rng(5);
  for (size_t n : sizes()) {
    std::vector<std::byte> bytes(codec_->maxEncodedBytes(n));
    for (auto& b : bytes) b = static_cast<std::byte>(rng());
    EXPECT_TRUE(decodeAlike(bytes, edgyAccumulator(n, n))) << "n=" << n;
  }
}

// decode() overwrites with exactly what decodeAdd() adds to -0.0, the identity of fp32
// addition (so a -0.0 stays -0.0 and a NaN keeps its bits), times the scale, in both ISAs:
// a sum that starts with a decoded contribution is the sum of the contributions.
TEST_P(IsaExactTest, DecodeIsDecodeAddOnNegativeZeroScaledInBothIsas) {
  std::mt19937_64 rng(6);
  for (const float scale : {1.0f, 1.0f / 3.0f}) {
    for (size_t n : sizes()) {
      std::vector<std::byte> bytes(codec_->maxEncodedBytes(n));
      for (auto& b : bytes) b = static_cast<std::byte>(rng());
      auto [refusal, expected] = decodeAddWith(Isa::kGeneric, bytes, std::vector<float>(n, -0.0f));
      for (float& v : expected) v *= scale;
      for (Isa isa : {Isa::kGeneric, Isa::kAvx2}) {
        ASSERT_TRUE(cpu::setActiveIsa(isa).ok());
        std::vector<float> out = edgyAccumulator(n, n + 9);
        const std::vector<float> before = out;
        Status s = codec_->decode(bytes, out, scale, {});
        if (!refusal.empty()) {  // refused as decodeAdd refuses, the output untouched
          EXPECT_EQ(s.toString(), refusal) << "n=" << n;
          EXPECT_TRUE(sameFloats(out, before)) << "n=" << n;
          continue;
        }
        ASSERT_TRUE(s.ok()) << s.toString();
        EXPECT_TRUE(sameFloats(out, expected)) << "n=" << n << " isa " << static_cast<int>(isa) << " scale " << scale;
      }
    }
  }
}

// A pool splits the slice at multiples of 16 or 32 elements: each chunk starts mid-slice.
TEST_P(IsaExactTest, PoolChunksMatchOneGenericPass) {
  ThreadPool pool(3);
  auto split = testing::mustMake(GetParam().codec, GetParam().params, CodecEnv{&pool, 1024});
  const size_t n = (1 << 16) + 5;
  std::vector<float> s_generic, s_avx2;
  for (int step = 0; step < 3; ++step) {
    auto g = edgyGradient(n, 77 + step, GetParam().t);
    auto a = encodeWith(Isa::kGeneric, *codec_, g, s_generic);
    auto b = encodeWith(Isa::kAvx2, *split, g, s_avx2);
    ASSERT_TRUE(sameBytes(a, b)) << "step " << step;
    ASSERT_TRUE(sameFloats(s_generic, s_avx2)) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, IsaExactTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.label; });

// ---- The fp16 conversion over special values and random bit patterns (F16C against the
// integer conversion), and bf16 over the same patterns.

std::vector<float> specialFloats() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -2.0f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          -65520.0f,
                          65536.0f,
                          1e10f,
                          inf,
                          -inf,
                          std::nanf(""),
                          -std::nanf(""),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min()};
  for (int e = -27; e <= -12; ++e)  // around the half subnormal range and its ties
    for (float m :
         {1.0f, 1.5f, 3.0f, 0.75f, 1.0f + std::ldexp(1.0f, -11), 1.0f + std::ldexp(3.0f, -11)}) {
      v.push_back(std::ldexp(m, e));
      v.push_back(-std::ldexp(m, e));
    }
  uint32_t nan_bits[] = {0x7f800001u, 0x7fbfffffu, 0x7fc00001u, 0xffc12345u, 0x7f802000u};
  for (uint32_t bits : nan_bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  return v;
}

std::vector<float> randomBitPatterns(size_t n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<float> v(n);
  for (auto& x : v) {
    const uint32_t bits = rng();
    std::memcpy(&x, &bits, 4);
  }
  return v;
}

class CastPatternTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CastPatternTest, SpecialAndRandomBitPatternsMatchGeneric) {
  SKIP_WITHOUT_AVX2();
  IsaScope scope;
  auto plain = testing::mustMake(GetParam());
  auto feedback = testing::mustMake(GetParam(), {{"error_feedback", "true"}});
  auto inputs = specialFloats();
  auto random = randomBitPatterns(1 << 20, 3);
  inputs.insert(inputs.end(), random.begin(), random.end());
  for (const Codec* codec : {plain.get(), feedback.get()}) {
    std::vector<float> s_generic, s_avx2;
    ASSERT_TRUE(cpu::setActiveIsa(Isa::kGeneric).ok());
    auto a = testing::encode(*codec, inputs, s_generic);
    ASSERT_TRUE(cpu::setActiveIsa(Isa::kAvx2).ok());
    auto b = testing::encode(*codec, inputs, s_avx2);
    ASSERT_TRUE(sameBytes(a, b));  // NaNs included: both write the canonical quiet NaN
    ASSERT_TRUE(sameFloats(s_generic, s_avx2));
  }
}

// Every fp32 bit pattern; a minute or so, so run it by hand after changing a cast:
//   compress_test --gtest_also_run_disabled_tests --gtest_filter='*AllFloats*'
TEST_P(CastPatternTest, DISABLED_AllFloatsMatchGeneric) {
  SKIP_WITHOUT_AVX2();
  IsaScope scope;
  auto codec = testing::mustMake(GetParam());
  const size_t kBlock = size_t{1} << 24;
  std::vector<float> in(kBlock);
  std::vector<float> none;
  for (uint64_t start = 0; start < (uint64_t{1} << 32); start += kBlock) {
    for (size_t i = 0; i < kBlock; ++i) {
      const uint32_t bits = static_cast<uint32_t>(start + i);
      std::memcpy(&in[i], &bits, 4);
    }
    ASSERT_TRUE(cpu::setActiveIsa(Isa::kGeneric).ok());
    auto a = testing::encode(*codec, in, none);
    ASSERT_TRUE(cpu::setActiveIsa(Isa::kAvx2).ok());
    auto b = testing::encode(*codec, in, none);
    ASSERT_TRUE(sameBytes(a, b)) << "block at 0x" << std::hex << start;
  }
}

INSTANTIATE_TEST_SUITE_P(Casts, CastPatternTest, ::testing::Values("fp16", "bf16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gcagent::compress

// Every codec's encoded bytes and state, over many sizes and steps of awkward gradients,
// pinned by a digest. The digests were taken from the straightforward loops the codecs
// started with; faster loops must reproduce them bit for bit, because the GPU kernels and
// peers running older builds decode and keep state exactly so. The suite runs under both
// CPU ISAs (ctest runs it again with GCAGENT_CPU_ISA=generic), and split over a pool.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress {
namespace {

// FNV-1a, 64 bits.
class Digest {
 public:
  void add(const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  void add(uint64_t v) { add(&v, sizeof v); }
  // NaN payloads after an fp32 addition depend on operand order: all NaNs hash alike.
  void addFloats(std::span<const float> v) {
    for (float x : v) {
      if (std::isnan(x)) x = std::numeric_limits<float>::quiet_NaN();
      add(&x, 4);
    }
  }
  std::string hex() const {
    char s[17];
    std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h_));
    return s;
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// Step 0: gaussians; 1: a mix of ties (multiples of 1/8), signed zeros, subnormals, huge
// and tiny values; 2: mostly one repeated magnitude (ties everywhere); 3: like 1, with a
// few infinities.
std::vector<float> awkwardGradient(size_t n, int step, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> gauss(0.0f, 0.5f);
  std::uniform_int_distribution<int> pick(0, 15), eighth(-16, 16);
  std::vector<float> g(n);
  for (auto& x : g) {
    const int p = pick(rng);
    if (step == 0) {
      x = gauss(rng);
    } else if (step == 2) {
      x = p < 12 ? ((rng() & 1) ? 0.25f : -0.25f) : gauss(rng);
    } else {
      switch (p) {
        case 0: case 1: case 2: x = eighth(rng) * 0.125f; break;
        case 3: x = (rng() & 1) ? 0.0f : -0.0f; break;
        case 4: x = std::ldexp(gauss(rng), -130); break;  // subnormal
        case 5: x = gauss(rng) * 1e4f; break;
        case 6: x = gauss(rng) * 1e-6f; break;
        case 7:
          x = step == 3 && (rng() % 512 == 0) ? ((rng() & 1) ? 1.0f : -1.0f) *
                                                    std::numeric_limits<float>::infinity()
                                              : gauss(rng);
          break;
        default: x = gauss(rng); break;
      }
    }
  }
  return g;
}

const std::vector<size_t> kDigestSizes = {0,   1,   2,   7,    8,    9,    15,   16,    17,
                                          31,  32,  33,  100,  255,  256,  257,  399,   400,
                                          401, 1000, 4095, 4096, 4097, 4109, 40000, 65541, 200003};

// The digest of `steps` encodes at every size (one fresh state per size): the status, the
// bytes and the whole state after each step.
std::string digestOf(const Codec& codec) {
  Digest d;
  for (size_t n : kDigestSizes) {
    std::vector<float> state(codec.stateElements(n), 0.0f);
    std::vector<std::byte> out(codec.maxEncodedBytes(n));
    for (int step = 0; step < 4; ++step) {
      const auto g = awkwardGradient(n, step, 7919 * n + static_cast<uint64_t>(step));
      const SliceId id{11, static_cast<uint32_t>(n % 5), static_cast<uint64_t>(step)};
      auto written = codec.encode(g, state, out, id);
      d.add(static_cast<uint64_t>(written.ok() ? StatusCode::kOk : written.status().code()));
      if (written.ok()) {
        d.add(*written);
        d.add(out.data(), *written);
      }
      d.addFloats(state);
    }
  }
  return d.hex();
}

struct Case {
  std::string label;
  std::string codec;
  Params params;
  std::string digest;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

std::vector<Case> cases() {
  return {
      {"none", "none", {}, "9164ae42808341fc"},
      {"fp16", "fp16", {}, "cd04fc5572094602"},
      {"bf16", "bf16", {}, "309e07641f5df35c"},
      {"mx2bit", "2bit", {}, "45350cf8f81a61e3"},
      {"mx1bit", "1bit", {}, "262605c9bdf7bf52"},
      {"onebit", "onebit", {}, "a6d8050f4fc857a0"},
      {"onebit_unscaled", "onebit", {{"scaled", "false"}}, "1128f36f25c2b19e"},
      {"terngrad", "terngrad", {}, "c6b6f919209a1b0d"},
      {"terngrad_noclip", "terngrad", {{"clip", "false"}}, "5c5da278c8658547"},
      {"terngrad_feedback", "terngrad", {{"error_feedback", "true"}}, "815e97207a7f071c"},
      {"qsgd_feedback", "qsgd", {{"error_feedback", "true"}}, "347b866543ea4aa1"},
      {"qsgd", "qsgd", {}, "7279d38be9e9d12b"},
      {"int8", "int8", {}, "110d1c4ea8c650cf"},
      {"int8_stochastic", "int8", {{"stochastic", "true"}, {"block", "37"}}, "edf840c891ad9912"},
      {"randomk", "randomk", {}, "d98fe4d944b692ee"},
      {"topk", "topk", {}, "20498f2ca724a1ae"},
      {"topk_0001", "topk", {{"ratio", "0.001"}}, "5f4419ab49b67108"},
      {"topk_03", "topk", {{"ratio", "0.3"}}, "910d5375ec8f66ed"},
      // The first three are the defaults before the warm-up (momentum 0.9, no warm-up).
      {"dgc", "dgc", {{"momentum", "0.9"}, {"warmup_steps", "0"}}, "8fe73d4a9a1bb05f"},
      {"dgc_01_m0", "dgc", {{"ratio", "0.01"}, {"momentum", "0"}, {"warmup_steps", "0"}}, "a3a5eb3cc4d6f895"},
      {"dgc_sample1", "dgc", {{"ratio", "0.05"}, {"momentum", "0.9"}, {"sample", "1"}, {"warmup_steps", "0"}},
       "d0c3a52c1fd18393"},
      {"dgc_defaults", "dgc", {}, "c37d135a94755f23"},
      {"dgc_warmup_m9", "dgc", {{"ratio", "0.01"}, {"momentum", "0.9"}, {"warmup_steps", "3"}}, "9fb67d348106e082"},
      {"dgc_no_feedback", "dgc", {{"error_feedback", "false"}}, "d1d85172cf5864e2"},
      {"threshold", "threshold", {}, "7b11564a41f11d05"},
      {"threshold_09", "threshold", {{"drop", "0.9"}, {"sample", "0.01"}}, "e1025fdfcbd57844"},
      {"threshold_0", "threshold", {{"drop", "0"}}, "6701f4c856e15822"},
      {"fp8", "fp8", {}, "55c26496305feec5"},
      {"fp8_e5m2", "fp8", {{"exponent_bits", "5"}, {"block", "128"}}, "897fa87ef594a273"},
      {"int4", "int4", {}, "4481768798d3fe6b"},
      {"int4_rotated_stochastic", "int4", {{"rotate", "true"}, {"stochastic", "true"}, {"block", "32"}}, "0d5eacea081986dd"},
      {"mxfp4", "mxfp4", {}, "c1451e90ceba7ca6"},
      {"mxfp4_rotated", "mxfp4", {{"rotate", "true"}}, "84a92ae5869e9ac7"},
  };
}

class DigestTest : public ::testing::TestWithParam<Case> {};

TEST_P(DigestTest, BytesAndStateMatchThePinnedDigest) {
  auto codec = testing::mustMake(GetParam().codec, GetParam().params);
  ASSERT_NE(codec, nullptr);
  EXPECT_EQ(digestOf(*codec), GetParam().digest);
}

// Split over a pool in chunks of 1024 elements: the same bytes and state.
TEST_P(DigestTest, PoolSplitMatchesThePinnedDigest) {
  ThreadPool pool(3);
  auto codec = testing::mustMake(GetParam().codec, GetParam().params, CodecEnv{&pool, 1024});
  ASSERT_NE(codec, nullptr);
  EXPECT_EQ(digestOf(*codec), GetParam().digest);
}

INSTANTIATE_TEST_SUITE_P(Codecs, DigestTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.label; });

}  // namespace
}  // namespace gcagent::compress

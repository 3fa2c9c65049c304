// The GPU codecs against the CPU codecs of the same name: encoded bytes, error-feedback
// state and decode-add results must match bit for bit, for the stochastic codecs too (their
// draws come from the same counter-based generator). Without a GPU every test that needs one
// skips with the reason.
#include "compress/cuda/gpu_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "compress/cuda/device_buffer.h"
#include "compress/registry.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::compress::cuda {
namespace {

using compress::testing::gaussian;

struct Case {
  std::string name;
  Params params;
};

// Shown in test listings instead of the struct's bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
  for (const auto& [k, v] : c.params) *os << " " << k << "=" << v;
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.name == "2bit" ? "mx2bit" : info.param.name == "1bit" ? "mx1bit" : info.param.name;
  for (const auto& [k, v] : info.param.params) s += "_" + k + "_" + v;
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

const std::vector<size_t> kSizes = {0, 1, 7, 16, 17, 33, 4096, 4099, 12289, (1u << 20) + 3};

template <class T>
std::vector<T> must(Result<std::vector<T>> r) {
  EXPECT_TRUE(r.ok()) << r.status().toString();
  return r.ok() ? std::move(r).value() : std::vector<T>{};
}

template <class T>
DeviceBuffer<T> onDevice(const std::vector<T>& host, size_t at_least = 0) {
  auto b = DeviceBuffer<T>::allocate(std::max(host.size(), at_least));
  EXPECT_TRUE(b.ok()) << b.status().toString();
  if (!b.ok()) return {};
  if (!host.empty()) {
    EXPECT_TRUE(b->upload(host).ok());
  }
  return std::move(b).value();
}

std::vector<uint32_t> bitsOf(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  if (!v.empty()) std::memcpy(out.data(), v.data(), 4 * v.size());
  return out;
}

class GpuCodecTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (Status s = gpuAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  }
};

TEST_P(GpuCodecTest, EncodeStateAndDecodeMatchTheCpuBitForBit) {
  const Case& c = GetParam();
  auto cpu = compress::testing::mustMake(c.name, c.params);
  auto gpu_or = makeGpuCodec(c.name, c.params);
  ASSERT_TRUE(gpu_or.ok()) << gpu_or.status().toString();
  GpuCodec& gpu = **gpu_or;
  ASSERT_NE(cpu, nullptr);
  for (size_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << c.name << " n=" << n);
    ASSERT_EQ(gpu.stateElements(n), cpu->stateElements(n));
    ASSERT_EQ(gpu.maxEncodedBytes(n), cpu->maxEncodedBytes(n));
    std::vector<float> cpu_state(cpu->stateElements(n), 0.0f);
    auto gpu_state = onDevice(cpu_state, 1);
    for (uint64_t step = 0; step < 3; ++step) {
      const SliceId id{42 + n, 3, step};
      auto g = gaussian(n, 1000 * n + step, step == 2 ? 0.01f : 1.0f);
      // Step 1 rounds to quarters: many equal magnitudes, so ties must break as on the CPU.
      if (step == 1)
        for (float& x : g) x = std::round(4 * x) / 4;
      std::vector<std::byte> cpu_out(cpu->maxEncodedBytes(n));
      auto cpu_bytes = cpu->encode(g, cpu_state, cpu_out, id);
      ASSERT_TRUE(cpu_bytes.ok()) << cpu_bytes.status().toString();

      auto gpu_g = onDevice(g, 1);
      auto gpu_out = onDevice(std::vector<std::byte>{}, std::max<size_t>(cpu_out.size(), 1));
      auto gpu_bytes = gpu.encode(gpu_g.span().first(n), gpu_state.span().first(cpu_state.size()),
                                  gpu_out.span().first(cpu_out.size()), id, nullptr);
      ASSERT_TRUE(gpu_bytes.ok()) << gpu_bytes.status().toString();
      ASSERT_TRUE(gpu.finish(nullptr).ok());
      size_t gpu_size = *gpu_bytes;
      if (!gpu.isFixedSize()) {  // the pair count heads the encoding
        ASSERT_EQ(gpu_size, cpu->maxEncodedBytes(n));
        uint32_t count = 0;
        const auto head = must(gpu_out.download(4));
        std::memcpy(&count, head.data(), 4);
        gpu_size = sparse::bytesFor(count);
      }
      ASSERT_EQ(gpu_size, *cpu_bytes);
      const auto got = must(gpu_out.download(*cpu_bytes));
      cpu_out.resize(*cpu_bytes);
      ASSERT_EQ(got, cpu_out) << "step " << step;
      ASSERT_EQ(bitsOf(must(gpu_state.download(cpu_state.size()))), bitsOf(cpu_state)) << "step " << step;

      // Decode-add into the same non-zero accumulator on both sides.
      std::vector<float> acc = gaussian(n, 7 + n, 0.5f);
      auto gpu_acc = onDevice(acc, 1);
      ASSERT_TRUE(cpu->decodeAdd(cpu_out, acc, id).ok());
      ASSERT_TRUE(gpu.decodeAdd(gpu_out.span().first(cpu_out.size()), gpu_acc.span().first(n), id, nullptr).ok());
      ASSERT_TRUE(gpu.finish(nullptr).ok());
      ASSERT_EQ(bitsOf(must(gpu_acc.download(n))), bitsOf(acc)) << "step " << step;
    }
  }
}

// Every registry row with its defaults, so a new codec is checked without a line here; then
// parameters that take other paths.
std::vector<Case> allCases() {
  std::vector<Case> cases;
  for (const CodecInfo& info : codecList()) cases.push_back(Case{std::string(info.name), {}});
  const Case more[] = {
      Case{"fp16", {{"error_feedback", "true"}}}, Case{"bf16", {{"error_feedback", "true"}}},
      Case{"2bit", {{"threshold", "0.125"}}}, Case{"1bit", {{"threshold", "0.25"}}},
      Case{"onebit", {{"scaled", "false"}}},
      Case{"terngrad", {{"clip", "false"}, {"error_feedback", "true"}, {"seed", "7"}}},
      Case{"qsgd", {{"bucket", "100"}, {"error_feedback", "true"}, {"levels", "4"}, {"seed", "3"}}},
      Case{"int8", {{"block", "37"}, {"stochastic", "true"}, {"error_feedback", "false"}}},
      Case{"topk", {{"ratio", "0.3"}}},
      Case{"threshold", {{"drop", "0.5"}, {"sample", "0.01"}, {"seed", "5"}}},
      // dgc's defaults (above) are in the warm-up, its counts planned on the device.
      Case{"dgc", {{"momentum", "0.9"}, {"warmup_steps", "0"}}},
      Case{"dgc", {{"momentum", "0"}, {"ratio", "0.05"}, {"sample", "0.001"}, {"seed", "9"}, {"warmup_steps", "0"}}},
      // Warm-up over, then at ratio: steps 0, 1, 2 keep 25%, 5%, 1%.
      Case{"dgc", {{"momentum", "0.9"}, {"ratio", "0.01"}, {"warmup_steps", "2"}}},
      Case{"dgc", {{"momentum", "0.9"}, {"error_feedback", "false"}}},
      Case{"randomk", {{"error_feedback", "false"}, {"ratio", "0.2"}, {"seed", "11"}}},
      Case{"fp8", {{"exponent_bits", "5"}, {"block", "256"}}},
      Case{"int4", {{"rotate", "true"}, {"stochastic", "true"}, {"seed", "4"}}},
      Case{"int4", {{"block", "32"}, {"error_feedback", "false"}}},
      Case{"mxfp4", {{"rotate", "true"}, {"block", "128"}}},
  };
  cases.insert(cases.end(), std::begin(more), std::end(more));
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Codecs, GpuCodecTest, ::testing::ValuesIn(allCases()), caseName);

// ---- Refusals: what the CPU codec refuses, the GPU codec refuses in the same words, and the
// buffers stay untouched.

class GpuCodecFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Status s = gpuAvailable(); !s.ok()) GTEST_SKIP() << s.message();
  }

  // Decodes `bytes` (an encoding of n elements) on the GPU into ones; expects `error` and an
  // untouched accumulator, then checks that a good buffer decodes afterwards.
  void expectDecodeRefused(const std::string& name, size_t n, const std::vector<std::byte>& bytes,
                           const std::string& error) {
    auto gpu = makeGpuCodec(name);
    ASSERT_TRUE(gpu.ok()) << gpu.status().toString();
    auto in = onDevice(bytes);
    auto acc = onDevice(std::vector<float>(n, 1.0f));
    ASSERT_TRUE((*gpu)->decodeAdd(in.span(), acc.span(), {}, nullptr).ok());
    const Status s = (*gpu)->finish(nullptr);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_EQ(s.message(), error);
    EXPECT_EQ(must(acc.download()), std::vector<float>(n, 1.0f));
    // The CPU codec says the same of the same bytes.
    auto cpu = compress::testing::mustMake(name);
    std::vector<float> cpu_acc(n, 1.0f);
    const Status cpu_s = cpu->decodeAdd(bytes, cpu_acc, {});
    EXPECT_EQ(cpu_s.message(), error);
    // The fault is cleared by finish(): the next call works.
    std::vector<std::byte> good(cpu->maxEncodedBytes(n));
    std::vector<float> state(cpu->stateElements(n), 0.0f);
    ASSERT_TRUE(cpu->encode(std::vector<float>(n, 0.25f), state, good, {}).ok());
    auto good_in = onDevice(good);
    ASSERT_TRUE((*gpu)->decodeAdd(good_in.span(), acc.span(), {}, nullptr).ok());
    EXPECT_TRUE((*gpu)->finish(nullptr).ok());
    EXPECT_NE(must(acc.download()), std::vector<float>(n, 1.0f));
  }
};

std::vector<std::byte> withFloatAt(std::vector<std::byte> bytes, size_t at, float v) {
  std::memcpy(bytes.data() + at, &v, 4);
  return bytes;
}

TEST_F(GpuCodecFaultTest, OnebitRefusesANegativeScale) {
  std::vector<std::byte> bytes(4 + 4 * 2);  // 40 elements
  expectDecodeRefused("onebit", 40, withFloatAt(bytes, 0, -2.0f),
                      "onebit: scale is -2, expected a finite value >= 0");
}

TEST_F(GpuCodecFaultTest, OnebitRefusesSetPaddingBits) {
  std::vector<std::byte> bytes = withFloatAt(std::vector<std::byte>(4 + 4 * 2), 0, 1.0f);
  bytes[4 + 5] = std::byte{0x01};  // element 47 of 40
  expectDecodeRefused("onebit", 40, bytes, "onebit: padding bits past element 40 are set");
}

TEST_F(GpuCodecFaultTest, TerngradRefusesCode01) {
  std::vector<std::byte> bytes = withFloatAt(std::vector<std::byte>(4 + 4 * 2), 0, 1.0f);
  bytes[4 + 3] = std::byte{0x10};  // element 13 holds 0b01
  expectDecodeRefused("terngrad", 20, bytes, "terngrad: element 13 has code 1, which the encoder never writes");
}

TEST_F(GpuCodecFaultTest, QsgdRefusesALevelOutOfRangeAfterCheckingNorms) {
  const size_t n = 1030;  // 3 buckets of 512
  std::vector<std::byte> bytes(4 * 3 + n);
  bytes[4 * 3 + 700] = std::byte{0x80};  // level -128
  bytes[4 * 3 + 900] = std::byte{0x80};
  expectDecodeRefused("qsgd", n, bytes, "qsgd: element 700 has level -128, outside [-127, 127]");
  bytes = withFloatAt(bytes, 4, std::numeric_limits<float>::infinity());
  expectDecodeRefused("qsgd", n, bytes, "qsgd: bucket 1 has norm inf, expected a finite value >= 0");
}

std::vector<std::byte> pairs(uint32_t count, std::vector<uint32_t> indices, size_t total_pairs) {
  std::vector<std::byte> bytes(4 + 8 * total_pairs);
  std::memcpy(bytes.data(), &count, 4);
  std::memcpy(bytes.data() + 4, indices.data(), 4 * indices.size());
  return bytes;
}

TEST_F(GpuCodecFaultTest, SparseRefusesACountBeyondTheSlice) {
  // topk at ratio 0.01 of 300 elements: k = 3, 28 bytes.
  expectDecodeRefused("topk", 300, pairs(301, {0, 1, 2}, 3),
                      "topk: encoded count 301 exceeds the slice length 300");
}

TEST_F(GpuCodecFaultTest, SparseRefusesAnIndexOutsideTheSlice) {
  expectDecodeRefused("topk", 300, pairs(3, {0, 300, 2}, 3),
                      "topk: pair 1 has index 300, outside the slice of 300 elements");
}

TEST_F(GpuCodecFaultTest, SparseRefusesARepeatedIndex) {
  auto gpu = makeGpuCodec("topk");
  ASSERT_TRUE(gpu.ok()) << gpu.status().toString();
  auto in = onDevice(pairs(3, {7, 5, 7}, 3));
  auto acc = onDevice(std::vector<float>(300, 1.0f));
  ASSERT_TRUE((*gpu)->decodeAdd(in.span(), acc.span(), {}, nullptr).ok());
  const Status s = (*gpu)->finish(nullptr);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  // Which of the two pairs is named depends on which thread came second.
  EXPECT_TRUE(s.message() == "topk: pair 2 repeats index 7" || s.message() == "topk: pair 0 repeats index 7")
      << s.message();
  EXPECT_EQ(must(acc.download()), std::vector<float>(300, 1.0f));
}

// A non-finite gradient is refused before the state changes, in the CPU codec's words.
TEST_F(GpuCodecFaultTest, NonFiniteGradientLeavesTheStateAlone) {
  for (const std::string name : {"onebit", "terngrad", "qsgd", "int8", "fp8", "mxfp4"}) {
    SCOPED_TRACE(name);
    const Params params = name == "onebit" ? Params{} : Params{{"error_feedback", "true"}};
    auto cpu = compress::testing::mustMake(name, params);
    auto gpu = makeGpuCodec(name, params);
    ASSERT_TRUE(gpu.ok()) << gpu.status().toString();
    const size_t n = 5000;
    std::vector<float> g = gaussian(n, 5);
    g[4500] = std::numeric_limits<float>::infinity();
    std::vector<float> state(n, 0.5f);
    std::vector<std::byte> out(cpu->maxEncodedBytes(n));
    auto cpu_r = cpu->encode(g, state, out, {});
    ASSERT_FALSE(cpu_r.ok());

    auto dg = onDevice(g);
    auto dstate = onDevice(std::vector<float>(n, 0.5f));
    auto dout = onDevice(std::vector<std::byte>(out.size()));
    ASSERT_TRUE((*gpu)->encode(dg.span(), dstate.span(), dout.span(), {}, nullptr).ok());
    const Status s = (*gpu)->finish(nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), cpu_r.status().message());
    EXPECT_EQ(must(dstate.download()), std::vector<float>(n, 0.5f));
  }
}

// ---- What needs no GPU.

TEST(GpuCodecRegistryTest, EveryRegisteredCodecHasGpuKernels) {
  std::vector<std::string_view> cpu;
  for (const CodecInfo& info : codecList()) cpu.push_back(info.name);
  std::vector<std::string_view> gpu = gpuCodecNames();
  std::sort(cpu.begin(), cpu.end());
  std::sort(gpu.begin(), gpu.end());
  EXPECT_EQ(gpu, cpu);
}

TEST(GpuCodecRegistryTest, BadParametersAreRefusedAsTheCpuCodecRefusesThem) {
  auto gpu = makeGpuCodec("2bit", {{"threshold", "-1"}});
  auto cpu = makeCodec("2bit", {{"threshold", "-1"}});
  ASSERT_FALSE(gpu.ok());
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(gpu.status().toString(), cpu.status().toString());
  EXPECT_EQ(makeGpuCodec("nosuch").status().code(), StatusCode::kNotFound);
}

TEST(GpuCodecRegistryTest, EveryGpuCodecIsARegisteredCodec) {
  for (std::string_view name : gpuCodecNames()) EXPECT_TRUE(makeCodec(name).ok()) << name;
}

// Without a GPU the probe says why, and making a codec says the same.
TEST(GpuAvailabilityTest, NoGpuIsAnUnavailableStatusNamingTheCause) {
  const Status s = gpuAvailable();
  if (s.ok()) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message().rfind("no GPU: ", 0), 0u) << s.message();
  auto codec = makeGpuCodec("2bit");
  ASSERT_FALSE(codec.ok());
  EXPECT_EQ(codec.status().toString(), s.toString());
}

}  // namespace
}  // namespace gcagent::compress::cuda

// The CUDA coder device against the host coder device: encodings, error-feedback state,
// scaled decodes and element work must match bit for bit, and a corrupt encoding must reach
// after() in the CPU codec's words. Without a GPU every test that needs one skips with the
// reason, and making the device says why.
#include "agent/coding/cuda/cuda_coder_device.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "agent/coding/host_coder_device.h"
#include "compress/cuda/gpu_codec.h"
#include "compress/sparse/sparse_format.h"
#include "tests/compress/codec_test_util.h"

namespace gcagent::agent {
namespace {

using compress::testing::gaussian;

constexpr const char* kDescription = "gpu 0 (test)";

std::vector<uint32_t> bitsOf(const std::vector<float>& v) {
  std::vector<uint32_t> out(v.size());
  if (!v.empty()) std::memcpy(out.data(), v.data(), 4 * v.size());
  return out;
}

// The bytes an encoding holds: what encode() returned, or for a sparse codec (which returns
// the most it may write) what the pair count at the head says.
size_t countedSize(const compress::Codec& reference, const std::vector<std::byte>& head, size_t returned) {
  if (reference.isFixedSize()) return returned;
  uint32_t count = 0;
  std::memcpy(&count, head.data(), 4);
  return compress::sparse::bytesFor(count);
}

// A sparse encoding: `count` in the head, then the given indices and zero values, room for
// `total_pairs` pairs.
std::vector<std::byte> sparsePairs(uint32_t count, const std::vector<uint32_t>& indices, size_t total_pairs) {
  std::vector<std::byte> bytes(compress::sparse::bytesFor(total_pairs));
  std::memcpy(bytes.data(), &count, 4);
  std::memcpy(bytes.data() + 4, indices.data(), 4 * indices.size());
  return bytes;
}

class CudaCoderDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Status s = compress::cuda::gpuAvailable(); !s.ok()) GTEST_SKIP() << s.message();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    // Non-blocking, as the agent's device streams are.
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
    auto gpu = makeCudaCoderDevice(io_, 0, stream_, kDescription);
    ASSERT_TRUE(gpu.ok()) << gpu.status().toString();
    gpu_ = std::move(gpu).value();
    host_ = makeHostCoderDevice(io_);
  }

  void TearDown() override {
    if (gpu_ != nullptr) {
      for (void* p : device_memory_) gpu_->freeDevice(p);
      gpu_.reset();
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // The codec of `spec` on both devices.
  void makeBoth(const compress::CodecSpec& spec, std::unique_ptr<DeviceCodec>& gpu,
                std::unique_ptr<DeviceCodec>& host) {
    auto g = gpu_->makeCodec(spec);
    ASSERT_TRUE(g.ok()) << g.status().toString();
    auto h = host_->makeCodec(spec);
    ASSERT_TRUE(h.ok()) << h.status().toString();
    gpu = std::move(g).value();
    host = std::move(h).value();
  }

  // Runs the engine's loop until the device's after() reports; returns the report.
  Status settle(CoderDevice& device) {
    std::optional<Status> got;
    device.after([&](const Status& s) { got = s; });
    runUntil([&] { return got.has_value(); });
    EXPECT_TRUE(got.has_value()) << "after() never reported";
    return got.value_or(Status::deadlineExceeded("after() never reported"));
  }

  template <class Pred>
  void runUntil(Pred ready) {
    // The report is posted from a CUDA thread: keep the loop waiting for it.
    auto guard = asio::make_work_guard(io_);
    io_.restart();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ready() && std::chrono::steady_clock::now() < deadline) io_.run_one_for(std::chrono::milliseconds(100));
  }

  // Fresh device memory holding `values` (at least `at_least` elements), filled through
  // pinned memory and the device's copy().
  template <class T>
  T* upload(const std::vector<T>& values, size_t at_least = 0) {
    const size_t bytes = std::max(values.size(), at_least) * sizeof(T);
    auto dev = gpu_->allocateDevice(bytes);
    EXPECT_TRUE(dev.ok()) << dev.status().toString();
    if (!dev.ok()) return nullptr;
    device_memory_.push_back(*dev);
    if (!values.empty()) {
      auto staging = gpu_->allocateHost(values.size() * sizeof(T));
      EXPECT_TRUE(staging.ok()) << staging.status().toString();
      if (!staging.ok()) return nullptr;
      std::memcpy(*staging, values.data(), values.size() * sizeof(T));
      EXPECT_TRUE(gpu_->copy(*dev, *staging, values.size() * sizeof(T)).ok());
      const Status s = settle(*gpu_);
      EXPECT_TRUE(s.ok()) << s.toString();
      gpu_->freeHost(*staging);
    }
    return static_cast<T*>(*dev);
  }

  template <class T>
  std::vector<T> download(const T* p, size_t n) {
    std::vector<T> out(n);
    if (n == 0) return out;
    auto staging = gpu_->allocateHost(n * sizeof(T));
    EXPECT_TRUE(staging.ok()) << staging.status().toString();
    if (!staging.ok()) return out;
    EXPECT_TRUE(gpu_->copy(*staging, p, n * sizeof(T)).ok());
    const Status s = settle(*gpu_);
    EXPECT_TRUE(s.ok()) << s.toString();
    std::memcpy(out.data(), *staging, n * sizeof(T));
    gpu_->freeHost(*staging);
    return out;
  }

  asio::io_context io_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CoderDevice> gpu_;
  std::unique_ptr<CoderDevice> host_;
  std::vector<void*> device_memory_;
};

// ---- codecs

struct Case {
  std::string name;
  compress::Params params;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
  for (const auto& [k, v] : c.params) *os << " " << k << "=" << v;
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  std::string s = info.param.name == "2bit" ? "mx2bit" : info.param.name == "1bit" ? "mx1bit" : info.param.name;
  for (const auto& [k, v] : info.param.params) s += "_" + k + "_" + v;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class CudaCoderCodecTest : public CudaCoderDeviceTest, public ::testing::WithParamInterface<Case> {};

TEST_P(CudaCoderCodecTest, EncodeStateAndScaledDecodeMatchTheHostBitForBit) {
  const Case& c = GetParam();
  const compress::CodecSpec spec{c.name, c.params};
  auto reference = compress::testing::mustMake(c.name, c.params);
  ASSERT_NE(reference, nullptr);
  std::unique_ptr<DeviceCodec> gpu_codec, host_codec;
  ASSERT_NO_FATAL_FAILURE(makeBoth(spec, gpu_codec, host_codec));

  for (const size_t n : {size_t{1}, size_t{1000}, size_t{40000}}) {
    SCOPED_TRACE(::testing::Message() << c.name << " n=" << n);
    const size_t state_n = reference->stateElements(n);
    const size_t max_bytes = reference->maxEncodedBytes(n);
    std::vector<float> host_state(state_n, 0.0f);
    float* gpu_state = upload(host_state, 1);
    ASSERT_NE(gpu_state, nullptr);
    for (uint64_t step = 0; step < 3; ++step) {
      SCOPED_TRACE(::testing::Message() << "step " << step);
      const compress::SliceId id{17 + n, 2, step};
      std::vector<float> g = gaussian(n, 100 * n + step, step == 2 ? 0.01f : 1.0f);
      // Step 1 rounds to quarters: many equal magnitudes, so ties must break as on the host.
      if (step == 1)
        for (float& x : g) x = std::round(4 * x) / 4;

      std::vector<std::byte> host_out(max_bytes);
      auto host_bytes = host_codec->encode(g, host_state, host_out, id);
      ASSERT_TRUE(host_bytes.ok()) << host_bytes.status().toString();
      const Status host_encoded = settle(*host_);  // the host device runs its work on its own thread
      ASSERT_TRUE(host_encoded.ok()) << host_encoded.toString();
      host_out.resize(countedSize(*reference, host_out, *host_bytes));

      const float* gpu_g = upload(g);
      std::byte* gpu_out = upload(std::vector<std::byte>{}, max_bytes);
      ASSERT_NE(gpu_out, nullptr);
      auto gpu_bytes = gpu_codec->encode({gpu_g, n}, {gpu_state, state_n}, {gpu_out, max_bytes}, id);
      ASSERT_TRUE(gpu_bytes.ok()) << gpu_bytes.status().toString();
      const Status encoded = settle(*gpu_);
      ASSERT_TRUE(encoded.ok()) << encoded.toString();
      EXPECT_EQ(*gpu_bytes, *host_bytes);
      const size_t size =
          reference->isFixedSize() ? *gpu_bytes : countedSize(*reference, download(gpu_out, 4), *gpu_bytes);
      ASSERT_EQ(size, host_out.size());
      EXPECT_EQ(download(gpu_out, size), host_out);
      EXPECT_EQ(bitsOf(download(gpu_state, state_n)), bitsOf(host_state));

      // Both scales, into buffers holding something else: decode overwrites.
      for (const float scale : {1.0f, 1.0f / 3.0f}) {
        SCOPED_TRACE(::testing::Message() << "scale " << scale);
        std::vector<float> host_decoded(n, 5.0f);
        ASSERT_TRUE(host_codec->decode(host_out, host_decoded, scale, id).ok());
        const Status host_s = settle(*host_);
        ASSERT_TRUE(host_s.ok()) << host_s.toString();
        float* gpu_decoded = upload(std::vector<float>(n, 5.0f));
        const Status gpu_s = gpu_codec->decode({gpu_out, size}, {gpu_decoded, n}, scale, id);
        ASSERT_TRUE(gpu_s.ok()) << gpu_s.toString();
        const Status decoded = settle(*gpu_);
        ASSERT_TRUE(decoded.ok()) << decoded.toString();
        EXPECT_EQ(bitsOf(download(gpu_decoded, n)), bitsOf(host_decoded));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, CudaCoderCodecTest,
    ::testing::Values(Case{"none", {}}, Case{"fp16", {}}, Case{"fp16", {{"error_feedback", "true"}}},
                      Case{"bf16", {}}, Case{"bf16", {{"error_feedback", "true"}}}, Case{"2bit", {}},
                      Case{"1bit", {}}, Case{"onebit", {}}, Case{"terngrad", {{"error_feedback", "true"}}},
                      Case{"qsgd", {{"error_feedback", "true"}}}, Case{"int8", {}}, Case{"topk", {}},
                      Case{"topk", {{"ratio", "0.3"}}}, Case{"threshold", {}}, Case{"dgc", {}},
                      Case{"randomk", {}}),
    caseName);

TEST_F(CudaCoderDeviceTest, ACodecIsRefusedAsTheHostRefusesIt) {
  for (const compress::CodecSpec& spec :
       {compress::CodecSpec{"nosuch", {}}, compress::CodecSpec{"2bit", {{"threshold", "-1"}}}}) {
    auto gpu = gpu_->makeCodec(spec);
    auto host = host_->makeCodec(spec);
    ASSERT_FALSE(gpu.ok());
    ASSERT_FALSE(host.ok());
    EXPECT_EQ(gpu.status().toString(), host.status().toString());
  }
}

// ---- element work

TEST_F(CudaCoderDeviceTest, ElementWorkMatchesTheHostBitForBit) {
  EXPECT_EQ(gpu_->describe(), kDescription);
  for (const size_t n : {size_t{1}, size_t{1000}, size_t{40000}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> a = gaussian(n, 1 + n);
    const std::vector<float> b = gaussian(n, 2 + n, 0.5f);
    const std::vector<float> r = gaussian(n, 3 + n, 0.01f);

    std::vector<float> host_a = a;
    std::vector<float> host_r = r;
    ASSERT_TRUE(host_->add(host_a.data(), b.data(), n).ok());
    ASSERT_TRUE(host_->divide(host_a.data(), n, 3.0f).ok());
    ASSERT_TRUE(host_->flush(host_a.data(), host_r.data(), n).ok());
    ASSERT_TRUE(settle(*host_).ok());

    float* gpu_a = upload(a);
    float* gpu_b = upload(b);
    float* gpu_r = upload(r);
    ASSERT_TRUE(gpu_->add(gpu_a, gpu_b, n).ok());
    ASSERT_TRUE(gpu_->divide(gpu_a, n, 3.0f).ok());
    ASSERT_TRUE(gpu_->flush(gpu_a, gpu_r, n).ok());
    const Status s = settle(*gpu_);
    ASSERT_TRUE(s.ok()) << s.toString();
    EXPECT_EQ(bitsOf(download(gpu_a, n)), bitsOf(host_a));
    EXPECT_EQ(download(gpu_r, n), std::vector<float>(n, 0.0f));
    EXPECT_EQ(host_r, std::vector<float>(n, 0.0f));

    // Device to device copy, then zero.
    ASSERT_TRUE(gpu_->copy(gpu_b, gpu_a, n * sizeof(float)).ok());
    EXPECT_EQ(bitsOf(download(gpu_b, n)), bitsOf(host_a));
    ASSERT_TRUE(gpu_->zero(gpu_b, n * sizeof(float)).ok());
    EXPECT_EQ(download(gpu_b, n), std::vector<float>(n, 0.0f));
  }
}

TEST_F(CudaCoderDeviceTest, NonFiniteSlicesAreMarkedAsOnTheHost) {
  // The flags live in pinned host memory the kernel writes; an infinity or a NaN anywhere in
  // the range sets its flag, a finite range leaves it as it was.
  const size_t n = 40000;
  auto flags = gpu_->allocateHost(4 * sizeof(uint32_t));
  ASSERT_TRUE(flags.ok()) << flags.status().toString();
  uint32_t* flag = static_cast<uint32_t*>(*flags);
  const float bad[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 3; ++i) {
    std::vector<float> values = gaussian(n, 40 + i);
    values[n - 1 - static_cast<size_t>(i) * 7919] = bad[i];
    ASSERT_TRUE(gpu_->markNonFinite(upload(values), n, &flag[i]).ok());
  }
  ASSERT_TRUE(gpu_->markNonFinite(upload(gaussian(n, 50, 1e30f)), n, &flag[3]).ok());  // large, finite
  ASSERT_TRUE(settle(*gpu_).ok());
  EXPECT_EQ(std::vector<uint32_t>(flag, flag + 4), (std::vector<uint32_t>{1, 1, 1, 0}));
  gpu_->freeHost(*flags);
}

TEST_F(CudaCoderDeviceTest, NewMemoryIsZeroed) {
  const size_t n = 12345;
  auto dev = gpu_->allocateDevice(n * sizeof(float));
  ASSERT_TRUE(dev.ok()) << dev.status().toString();
  device_memory_.push_back(*dev);
  EXPECT_EQ(download(static_cast<const float*>(*dev), n), std::vector<float>(n, 0.0f));
  auto host = gpu_->allocateHost(n * sizeof(float));
  ASSERT_TRUE(host.ok()) << host.status().toString();
  const float* h = static_cast<const float*>(*host);
  EXPECT_EQ(std::vector<float>(h, h + n), std::vector<float>(n, 0.0f));
  gpu_->freeHost(*host);
}

TEST_F(CudaCoderDeviceTest, AnImpossibleAllocationNamesTheDeviceAndTheSize) {
  auto dev = gpu_->allocateDevice(size_t{1} << 50);
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(dev.status().message().rfind("gpu 0 (test): cudaMalloc of 1125899906842624 bytes failed: ", 0), 0u)
      << dev.status().message();
  // Refused at once, never reported again.
  const Status s = settle(*gpu_);
  EXPECT_TRUE(s.ok()) << s.toString();
}

TEST_F(CudaCoderDeviceTest, ReportsArriveInTheOrderAsked) {
  std::vector<int> order;
  gpu_->after([&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s.toString();
    order.push_back(1);
  });
  gpu_->after([&](const Status& s) {
    EXPECT_TRUE(s.ok()) << s.toString();
    order.push_back(2);
  });
  runUntil([&] { return order.size() == 2; });
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

// ---- data faults

// topk at ratio 0.01 of 300 elements: k = 3.
constexpr size_t kSparseN = 300;
const char* const kCountError = "topk: encoded count 301 exceeds the slice length 300";

TEST_F(CudaCoderDeviceTest, ACorruptEncodingIsReportedByAfterInTheCpuCodecsWords) {
  std::unique_ptr<DeviceCodec> gpu_codec, host_codec;
  ASSERT_NO_FATAL_FAILURE(makeBoth({"topk", {}}, gpu_codec, host_codec));

  const std::vector<std::byte> corrupt = sparsePairs(301, {0, 1, 2}, 3);
  std::vector<float> host_out(kSparseN, 1.0f);
  ASSERT_TRUE(host_codec->decode(corrupt, host_out, 1.0f, {}).ok());  // reported by after()
  const Status host_s = settle(*host_);
  EXPECT_EQ(host_s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(host_s.message(), kCountError);

  std::byte* gpu_in = upload(corrupt);
  float* gpu_out = upload(std::vector<float>(kSparseN, 1.0f));
  ASSERT_TRUE(gpu_codec->decode({gpu_in, corrupt.size()}, {gpu_out, kSparseN}, 1.0f, {}).ok());
  const Status s = settle(*gpu_);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), kCountError);

  // Reported once: a good encoding decodes afterwards, as on the host.
  std::vector<float> state;
  const std::vector<float> g = gaussian(kSparseN, 9);
  auto reference = compress::testing::mustMake("topk");
  const std::vector<std::byte> good = compress::testing::encode(*reference, g, state);
  std::vector<float> host_good(kSparseN, 1.0f);
  ASSERT_TRUE(host_codec->decode(good, host_good, 0.5f, {}).ok());
  ASSERT_TRUE(settle(*host_).ok());
  std::byte* gpu_good_in = upload(good);
  ASSERT_TRUE(gpu_codec->decode({gpu_good_in, good.size()}, {gpu_out, kSparseN}, 0.5f, {}).ok());
  const Status after_good = settle(*gpu_);
  EXPECT_TRUE(after_good.ok()) << after_good.toString();
  EXPECT_EQ(bitsOf(download(gpu_out, kSparseN)), bitsOf(host_good));
}

// A fault belongs to the after() whose work it stopped: each after() snapshots and clears the
// codec's fault record in the stream, so work queued behind it runs and reports ok, without
// any report waiting for the stream.
TEST_F(CudaCoderDeviceTest, AFaultStopsOnlyTheWorkOfItsOwnAfter) {
  std::unique_ptr<DeviceCodec> gpu_codec, host_codec;
  ASSERT_NO_FATAL_FAILURE(makeBoth({"topk", {}}, gpu_codec, host_codec));
  const std::vector<std::byte> corrupt = sparsePairs(301, {0, 1, 2}, 3);
  std::vector<float> state;
  auto reference = compress::testing::mustMake("topk");
  const std::vector<std::byte> good = compress::testing::encode(*reference, gaussian(kSparseN, 11), state);
  std::byte* gpu_corrupt = upload(corrupt);
  std::byte* gpu_good = upload(good);
  float* gpu_out = upload(std::vector<float>(kSparseN, 1.0f));

  std::vector<Status> reports;
  auto keep = [&](const Status& s) { reports.push_back(s); };
  ASSERT_TRUE(gpu_codec->decode({gpu_corrupt, corrupt.size()}, {gpu_out, kSparseN}, 1.0f, {}).ok());
  gpu_->after(keep);
  const std::span<const std::byte> good_bytes(good);
  ASSERT_TRUE(gpu_codec->decode({gpu_good, good_bytes.size()}, {gpu_out, kSparseN}, 0.5f, {}).ok());
  gpu_->after(keep);
  runUntil([&] { return reports.size() == 2; });
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].message(), kCountError);
  EXPECT_TRUE(reports[1].ok()) << reports[1].toString();
  std::vector<float> host_out(kSparseN, 1.0f);
  ASSERT_TRUE(host_codec->decode(good_bytes, host_out, 0.5f, {}).ok());
  ASSERT_TRUE(settle(*host_).ok());
  EXPECT_EQ(bitsOf(download(gpu_out, kSparseN)), bitsOf(host_out));
}

// ---- without a GPU

TEST(CudaCoderDeviceWithoutGpuTest, MakingTheDeviceSaysWhy) {
  const Status available = compress::cuda::gpuAvailable();
  if (available.ok()) GTEST_SKIP() << "a GPU is present";
  asio::io_context io;
  auto device = makeCudaCoderDevice(io, 0, nullptr, "gpu 0");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(device.status().message(), "gpu 0: " + available.message());
}

}  // namespace
}  // namespace gcagent::agent

// The LocalCoder on the host device, against the CPU codecs called directly: the payloads are
// the codec's encodings of the local sum with a residual carried along by the test, byte for
// byte, and the decoded results are Codec::decode's output in every buffer.
#include "agent/coding/local_coder.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "agent/coding/host_coder_device.h"
#include "compress/registry.h"

namespace gcagent::agent {
namespace {

// The encodings' bytes, copied out of whatever holds them.
Result<std::vector<std::shared_ptr<ByteBuffer>>> copied(Result<KeyEncodings> r) {
  if (!r.ok()) return r.status();
  std::vector<std::shared_ptr<ByteBuffer>> out;
  for (const SliceEncoding& e : r->slices) out.push_back(std::make_shared<ByteBuffer>(e.bytes.begin(), e.bytes.end()));
  return out;
}

class LocalCoderTest : public ::testing::Test {
 protected:
  LocalCoderTest() : coder_(makeHostCoderDevice(io_)) {}

  // Runs the io context until the coder has reported.
  void settle() {
    io_.restart();
    io_.run();
  }

  Result<std::vector<std::shared_ptr<ByteBuffer>>> encode(const KeyWork& w, bool compressed) {
    Result<std::vector<std::shared_ptr<ByteBuffer>>> got = Status::internal("no report");
    coder_.encode(w, compressed, {}, [&](Result<KeyEncodings> r) { got = copied(std::move(r)); });
    settle();
    return got;
  }

  Status decode(const KeyWork& w, uint32_t slice, bool compressed, std::span<const std::byte> bytes, float divisor) {
    Status got = Status::internal("no report");
    coder_.decodeResult(w, slice, compressed, bytes, divisor, [&](const Status& s) { got = s; });
    settle();
    return got;
  }

  asio::io_context io_;
  LocalCoder coder_;
};

std::vector<float> randomValues(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

KeyWork workOf(std::string codec, uint64_t elements, uint64_t slice_elements, std::vector<float*> buffers,
               uint64_t iteration) {
  KeyWork w;
  w.job = 1;
  w.key = 42;
  w.iteration = iteration;
  w.push = {codec, {}};
  w.pull = {codec, {}};
  w.geometry = {elements, slice_elements};
  w.buffers = std::move(buffers);
  return w;
}

TEST_F(LocalCoderTest, PayloadsAreTheCodecsEncodingsOfTheSumWithItsResiduals) {
  const uint64_t n = 2500, slice = 1000;
  for (const char* name : {"none", "2bit", "onebit", "dgc", "topk", "terngrad"}) {
    SCOPED_TRACE(name);
    auto codec = compress::makeCodec(name).value();
    scheduler::SliceGeometry g{n, slice};
    std::vector<std::vector<float>> states(g.count());
    for (uint32_t s = 0; s < g.count(); ++s) states[s].assign(codec->stateElements(g.size(s)), 0.0f);
    for (uint64_t it = 1; it <= 3; ++it) {
      std::vector<float> a = randomValues(n, 10 * it), b = randomValues(n, 10 * it + 1);
      std::vector<float> sum(n);
      for (uint64_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
      KeyWork w = workOf(name, n, slice, {a.data(), b.data()}, it);
      w.job = std::string_view(name).size();  // a key per codec
      auto payloads = encode(w, /*compressed=*/true);
      ASSERT_TRUE(payloads.ok()) << payloads.status().toString();
      ASSERT_EQ(payloads->size(), g.count());
      EXPECT_EQ(a, sum) << "the sum is left in the first buffer";
      for (uint32_t s = 0; s < g.count(); ++s) {
        ByteBuffer want(codec->maxEncodedBytes(g.size(s)));
        auto written = codec->encode({sum.data() + g.begin(s), g.size(s)}, states[s], want, {w.key, s, it});
        ASSERT_TRUE(written.ok());
        want.resize(*written);
        ASSERT_EQ(*(*payloads)[s], want) << "slice " << s << " iteration " << it;
      }
    }
  }
}

TEST_F(LocalCoderTest, UncompressedAfterCompressedCarriesTheResidualAndClearsIt) {
  const uint64_t n = 1500;
  auto codec = compress::makeCodec("2bit", {{"threshold", "0.5"}}).value();
  std::vector<float> state(codec->stateElements(n), 0.0f);
  std::vector<float> g = randomValues(n, 7), copy = g;
  KeyWork w = workOf("2bit", n, n, {g.data()}, 1);
  w.push.params = w.pull.params = {{"threshold", "0.5"}};
  ASSERT_TRUE(encode(w, true).ok());
  ByteBuffer scratch(codec->maxEncodedBytes(n));
  ASSERT_TRUE(codec->encode(copy, state, scratch, {42, 0, 1}).ok());  // the residual the coder now holds
  std::vector<float> h = randomValues(n, 8);
  std::vector<float> want(n);
  for (uint64_t i = 0; i < n; ++i) want[i] = h[i] + state[i];
  w.iteration = 2;
  w.buffers = {h.data()};
  auto raw = encode(w, false);
  ASSERT_TRUE(raw.ok()) << raw.status().toString();
  ASSERT_EQ((*raw)[0]->size(), n * sizeof(float));
  EXPECT_EQ(std::memcmp((*raw)[0]->data(), want.data(), n * sizeof(float)), 0);
  // Cleared: a compressed round now starts from a zero residual.
  std::vector<float> k = randomValues(n, 9), k_copy = k;
  w.iteration = 3;
  w.buffers = {k.data()};
  auto again = encode(w, true);
  ASSERT_TRUE(again.ok());
  std::vector<float> zero(codec->stateElements(n), 0.0f);
  ByteBuffer fresh(codec->maxEncodedBytes(n));
  fresh.resize(codec->encode(k_copy, zero, fresh, {42, 0, 3}).value());
  EXPECT_EQ(*(*again)[0], fresh);
}

TEST_F(LocalCoderTest, ResultsAreDecodedAndDividedOnceIntoEveryBuffer) {
  const uint64_t n = 3000, slice = 1024;
  auto codec = compress::makeCodec("fp16").value();
  std::vector<float> a(n, -7.0f), b(n, -7.0f);
  KeyWork w = workOf("fp16", n, slice, {a.data(), b.data()}, 1);
  scheduler::SliceGeometry g{n, slice};
  std::vector<float> values = randomValues(g.size(2), 3);
  ByteBuffer encoded(codec->maxEncodedBytes(values.size()));
  encoded.resize(codec->encode(values, {}, encoded, {42, 2, 1}).value());
  ASSERT_TRUE(decode(w, 2, true, encoded, 3.0f).ok());
  std::vector<float> want(values.size());
  ASSERT_TRUE(codec->decode(encoded, want, 1.0f, {42, 2, 1}).ok());
  for (float& v : want) v /= 3.0f;  // a division, not a multiply by a rounded 1/3
  for (uint64_t i = 0; i < n; ++i) {
    const bool in_slice = i >= g.begin(2);
    ASSERT_EQ(a[i], in_slice ? want[i - g.begin(2)] : -7.0f) << i;
    ASSERT_EQ(b[i], a[i]) << i;
  }
  // Uncompressed results take the raw decoder; a divisor of 1 leaves the sum as it came.
  std::vector<float> raw = randomValues(g.size(0), 4);
  ASSERT_TRUE(decode(w, 0, false, std::as_bytes(std::span<const float>(raw)), 3.0f).ok());
  for (uint64_t i = 0; i < g.size(0); ++i) ASSERT_EQ(b[i], raw[i] / 3.0f) << i;
  ASSERT_TRUE(decode(w, 0, false, std::as_bytes(std::span<const float>(raw)), 1.0f).ok());
  for (uint64_t i = 0; i < g.size(0); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(b[i]), std::bit_cast<uint32_t>(raw[i])) << i;
  // A power-of-two divisor is folded into the decode (scaled by its reciprocal): still the
  // division's bits, compressed or not.
  ASSERT_TRUE(decode(w, 2, true, encoded, 4.0f).ok());
  ASSERT_TRUE(codec->decode(encoded, want, 1.0f, {42, 2, 1}).ok());
  for (uint64_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(a[g.begin(2) + i]), std::bit_cast<uint32_t>(want[i] / 4.0f)) << i;
  ASSERT_TRUE(decode(w, 0, false, std::as_bytes(std::span<const float>(raw)), 4.0f).ok());
  for (uint64_t i = 0; i < g.size(0); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(b[i]), std::bit_cast<uint32_t>(raw[i] / 4.0f)) << i;
}

TEST_F(LocalCoderTest, ACorruptResultIsReportedWithTheCodecsWords) {
  const uint64_t n = 1000;
  std::vector<float> a(n, 1.0f);
  KeyWork w = workOf("topk", n, n, {a.data()}, 1);
  ByteBuffer bad(12, std::byte{0});
  const uint32_t pairs = 1;
  const uint32_t index = 5000;  // beyond the slice
  std::memcpy(bad.data(), &pairs, 4);
  std::memcpy(bad.data() + 4, &index, 4);
  Status s = decode(w, 0, true, bad, 1.0f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("decoding on host: "), std::string::npos) << s.toString();
  EXPECT_NE(s.message().find("topk"), std::string::npos) << s.toString();
  // More bytes than any encoding of the slice: refused before it is copied anywhere.
  ByteBuffer huge(1 << 20);
  s = decode(w, 0, true, huge, 1.0f);
  EXPECT_NE(s.message().find("a result of 1048576 bytes for 1000 elements"), std::string::npos) << s.toString();
}

TEST_F(LocalCoderTest, DecodesWithoutAReportAreReportedByTheNextOne) {
  const uint64_t n = 3000, slice = 1000;
  auto codec = compress::makeCodec("fp16").value();
  std::vector<float> a(n, -7.0f);
  KeyWork w = workOf("fp16", n, slice, {a.data()}, 1);
  auto encodingOf = [&](uint32_t s, uint32_t seed) {
    std::vector<float> values = randomValues(slice, seed);
    ByteBuffer encoded(codec->maxEncodedBytes(slice));
    encoded.resize(codec->encode(values, {}, encoded, {42, s, 1}).value());
    return encoded;
  };
  const ByteBuffer e0 = encodingOf(0, 5), e2 = encodingOf(2, 6);
  const ByteBuffer huge(1 << 20);
  bool reported = false;
  coder_.decodeResult(w, 0, true, e0, 1.0f, {});
  coder_.decodeResult(w, 1, true, huge, 1.0f, {});  // refused: the next report says so
  coder_.decodeResult(w, 2, true, e2, 1.0f, [&](const Status& s) {
    reported = true;
    EXPECT_EQ(s.message(), "decoding on host: slice 1: a result of 1048576 bytes for 1000 elements") << s.toString();
  });
  settle();
  EXPECT_TRUE(reported);
  std::vector<float> want(slice);
  ASSERT_TRUE(codec->decode(e2, want, 1.0f, {42, 2, 1}).ok());
  for (uint64_t i = 0; i < slice; ++i) ASSERT_EQ(a[2 * slice + i], want[i]) << i;
  // Reported once: the next report is clean.
  EXPECT_TRUE(decode(w, 0, true, e0, 1.0f).ok());
  // A new iteration's encode drops what an abandoned one left.
  coder_.decodeResult(w, 1, true, huge, 1.0f, {});
  std::vector<float> b(n, 1.0f);
  ASSERT_TRUE(encode(workOf("fp16", n, slice, {b.data()}, 2), true).ok());
  EXPECT_TRUE(decode(w, 0, true, e0, 1.0f).ok());
}

TEST_F(LocalCoderTest, AverageOfTheLocalBuffers) {
  std::vector<float> a = {1, 2, 3}, b = {3, 4, 5}, c = {5, 6, 10};
  KeyWork w = workOf("none", 3, 3, {a.data(), b.data(), c.data()}, 1);
  Status got = Status::internal("no report");
  coder_.sum(w, 3.0f, [&](const Status& s) { got = s; });
  settle();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(a, (std::vector<float>{3, 4, 6}));
  EXPECT_EQ(b, a);
  EXPECT_EQ(c, a);
}

TEST_F(LocalCoderTest, SumOfTheLocalBuffersInLocalRankOrder) {
  // 1 + 2^-24 + 2^-24: (1 + 2^-24) rounds to 1 (ties to even), then 1 again; another order
  // (2^-24 + 2^-24 first) would give 1 + 2^-23.
  const float tiny = std::ldexp(1.0f, -24);
  std::vector<float> a = {1.0f}, b = {tiny}, c = {tiny};
  KeyWork w = workOf("none", 1, 1, {a.data(), b.data(), c.data()}, 1);
  Status got = Status::internal("no report");
  coder_.sum(w, 1.0f, [&](const Status& s) { got = s; });
  settle();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(a[0], 1.0f);
  EXPECT_EQ(c[0], 1.0f);
}

TEST_F(LocalCoderTest, ResidualsBeyondTheBudgetAreRefusedNamingIt) {
  LocalCoder small(makeHostCoderDevice(io_), /*residual_budget_bytes=*/6000);
  std::vector<float> a(2500, 0.5f);
  KeyWork w = workOf("2bit", 2500, 1000, {a.data()}, 1);  // 2bit keeps 4 bytes per element
  Result<std::vector<std::shared_ptr<ByteBuffer>>> got = Status::internal("no report");
  small.encode(w, true, {}, [&](Result<KeyEncodings> r) { got = copied(std::move(r)); });
  settle();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(got.status().message().find("residuals: tensor 42 slice 1 needs 4000 bytes, but 4000 of the 6000-byte "
                                        "budget are in use"),
            std::string::npos)
      << got.status().toString();
  // Forgetting the key gives its residuals back: a smaller tensor fits.
  small.forget(w.job, w.key);
  std::vector<float> b(1500, 0.5f);
  KeyWork fits = workOf("2bit", 1500, 1000, {b.data()}, 1);
  small.encode(fits, true, {}, [&](Result<KeyEncodings> r) { got = copied(std::move(r)); });
  settle();
  EXPECT_TRUE(got.ok()) << got.status().toString();
}

TEST_F(LocalCoderTest, AnUnknownCodecIsAnErrorNamingIt) {
  std::vector<float> a(10, 1.0f);
  auto got = encode(workOf("zip", 10, 10, {a.data()}, 1), true);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("zip"), std::string::npos) << got.status().toString();
}

}  // namespace
}  // namespace gcagent::agent

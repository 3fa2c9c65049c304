// Helpers shared by the codec tests: deterministic gradients, the sizes every codec is
// tried at, and one-call encode / decode.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "compress/bytes.h"
#include "compress/codec.h"
#include "compress/registry.h"
#include "compress/sparse/sparse_format.h"

namespace gcagent::compress::testing {

// Every codec is tried at these slice lengths (empty, odd tails, word edges, large).
inline const std::vector<size_t> kSizes = {0, 1, 7, 16, 17, 4096, (1u << 20) + 3};

// Normally distributed values with a fixed seed.
inline std::vector<float> gaussian(size_t n, uint64_t seed, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::unique_ptr<Codec> mustMake(const std::string& name, const Params& params = {},
                                       const CodecEnv& env = {}) {
  auto codec = makeCodec(name, params, env);
  EXPECT_TRUE(codec.ok()) << codec.status().toString();
  return codec.ok() ? std::move(codec).value() : nullptr;
}

// Encodes `in` with `state` (resized to the codec's need if empty) and returns the bytes.
inline std::vector<std::byte> encode(const Codec& codec, std::span<const float> in,
                                     std::vector<float>& state, const SliceId& id = {}) {
  if (state.empty()) state.assign(codec.stateElements(in.size()), 0.0f);
  std::vector<std::byte> out(codec.maxEncodedBytes(in.size()));
  auto written = codec.encode(in, state, out, id);
  EXPECT_TRUE(written.ok()) << written.status().toString();
  out.resize(written.ok() ? *written : 0);
  return out;
}

// Decodes into a zeroed vector of n elements.
inline std::vector<float> decode(const Codec& codec, std::span<const std::byte> in, size_t n,
                                 const SliceId& id = {}) {
  std::vector<float> acc(n, 0.0f);
  Status s = codec.decodeAdd(in, acc, id);
  EXPECT_TRUE(s.ok()) << s.toString();
  return acc;
}

// The fp32 scale a scaled codec writes in front of its codes, read and overwritten.
inline float scaleOf(const std::vector<std::byte>& encoded) {
  float f;
  std::memcpy(&f, encoded.data(), sizeof f);
  return f;
}
inline void setScale(std::vector<std::byte>& encoded, float f) { std::memcpy(encoded.data(), &f, sizeof f); }

// A stochastic codec's bytes follow every field of the slice id and its `seed` parameter.
inline void expectDrawsFollowSliceIdAndSeed(const std::string& name) {
  const auto g = gaussian(4096, 8);
  auto encodeWith = [&](const Params& params, const SliceId& id) {
    std::vector<float> state;
    return encode(*mustMake(name, params), g, state, id);
  };
  const auto base = encodeWith({}, {1, 2, 3});
  EXPECT_EQ(encodeWith({}, {1, 2, 3}), base);
  EXPECT_NE(encodeWith({}, {1, 2, 4}), base);
  EXPECT_NE(encodeWith({}, {1, 3, 3}), base);
  EXPECT_NE(encodeWith({}, {2, 2, 3}), base);
  EXPECT_NE(encodeWith({{"seed", "1"}}, {1, 2, 3}), base);
}

// The bytes and state of three encodes split over a pool of 3 (1000 elements at least to a
// chunk) equal one thread's. The contract suite splits every codec with its defaults; this
// takes other parameters (error feedback, odd block sizes).
inline void expectPoolSplitMatches(const std::string& name, const Params& params) {
  ThreadPool pool(3);
  auto serial = mustMake(name, params);
  auto split = mustMake(name, params, CodecEnv{&pool, 1000});
  std::vector<float> s1, s2;
  for (uint64_t step = 0; step < 3; ++step) {
    auto g = gaussian(50'003, 60 + step);
    ASSERT_EQ(encode(*serial, g, s1, {4, 1, step}), encode(*split, g, s2, {4, 1, step}));
    ASSERT_EQ(s1, s2);
  }
}

// Every (key, value) must be refused by codec `name` with an error naming the codec and the key.
inline void expectBadParams(const std::string& name, const std::vector<std::pair<std::string, std::string>>& bad) {
  for (const auto& [key, value] : bad) {
    auto codec = makeCodec(name, {{key, value}});
    ASSERT_FALSE(codec.ok()) << name << ": " << key << "=" << value << " was accepted";
    EXPECT_TRUE(codec.status().code() == StatusCode::kInvalidArgument ||
                codec.status().code() == StatusCode::kOutOfRange)
        << codec.status().toString();
    EXPECT_NE(codec.status().message().find(name), std::string::npos) << codec.status().message();
    EXPECT_NE(codec.status().message().find(key), std::string::npos) << codec.status().message();
  }
}

// decodeAdd of `bad` must fail as data loss, name the codec first, and leave `acc` as it was.
inline std::string expectRejectedUntouched(const Codec& codec, const std::vector<std::byte>& bad,
                                           std::vector<float>& acc, const char* what) {
  const std::vector<float> before = acc;
  Status s = codec.decodeAdd(bad, acc, {});
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << what << ": " << s.toString();
  EXPECT_EQ(s.message().rfind(std::string(codec.name()) + ": ", 0), 0u) << s.message();
  EXPECT_EQ(acc, before) << what;
  return s.message();
}

// A scaled codec's `good` encoding with its fp32 scale made NaN, infinite or negative is
// refused untouched (as expectRejectedUntouched).
inline void expectBadScalesRejected(const Codec& codec, const std::vector<std::byte>& good, std::vector<float>& acc) {
  for (float scale : {std::nanf(""), std::numeric_limits<float>::infinity(), -0.5f}) {
    auto bad = good;
    setScale(bad, scale);
    expectRejectedUntouched(codec, bad, acc, "bad scale");
  }
}

// Bytes written out: bytes({0xe0, 0x03}).
inline std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

// A sparse (index, value) encoding, and the indices of one.
inline std::vector<std::byte> pairs(std::vector<uint32_t> idx, std::vector<float> val) {
  std::vector<std::byte> out(sparse::bytesFor(idx.size()));
  sparse::write(idx, val, out);
  return out;
}

inline std::vector<uint32_t> indicesOf(std::span<const std::byte> encoded) {
  std::vector<uint32_t> idx(loadLe<uint32_t>(encoded.data()));
  for (size_t j = 0; j < idx.size(); ++j) idx[j] = loadLe<uint32_t>(encoded.data() + 4 + 4 * j);
  return idx;
}

}  // namespace gcagent::compress::testing

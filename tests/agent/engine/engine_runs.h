// Runs of N engines checked against a reference computed apart, shared by the engine's tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "agent/engine/reduction_engine.h"
#include "tests/agent/engine/engine_cluster.h"

namespace gcagent::agent {

// A trainer's gradient element, in [-1, 1] in steps of 0.001: a hash of where it is.
inline float valueOf(uint32_t trainer, uint64_t iteration, uint64_t key, uint64_t i) {
  uint64_t x = (trainer * 1000003ull) ^ (iteration * 7919ull) ^ (key * 104729ull) ^ (i * 2654435761ull);
  x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull;
  return static_cast<float>(static_cast<int64_t>(x >> 40) % 2001 - 1000) / 1000.0f;
}

// Every trainer's buffers after each iteration: seen[iteration][node][local][key].
using Seen = std::vector<std::vector<std::vector<std::vector<std::vector<float>>>>>;

// Runs iterations `first` to `last` of each key of `sizes` (keys 100, 101, ...) of a
// declared job, with the nodes submitting in a different order each iteration, so that owners
// see contributions before their own. Appends every trainer's buffers to `seen`.
inline void runIterations(Cluster& c, uint64_t job, uint32_t local, const std::vector<uint64_t>& sizes, int first,
                          int last, Seen& seen, float (*value)(uint32_t, uint64_t, uint64_t, uint64_t) = valueOf) {
  for (int it = first; it <= last; ++it) {
    auto& buffers = seen.emplace_back(c.size());
    for (uint32_t r = 0; r < c.size(); ++r) {
      buffers[r].assign(local, {});
      for (uint32_t l = 0; l < local; ++l)
        for (size_t k = 0; k < sizes.size(); ++k) {
          std::vector<float> v(sizes[k]);
          for (uint64_t i = 0; i < sizes[k]; ++i) v[i] = value(r * local + l, it, 100 + k, i);
          buffers[r][l].push_back(std::move(v));
        }
    }
    for (uint32_t step = 0; step < c.size(); ++step) {
      const uint32_t r = (c.size() - 1 - step + static_cast<uint32_t>(it)) % c.size();
      for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<float*> ptrs;
        for (uint32_t l = 0; l < local; ++l) ptrs.push_back(buffers[r][l][k].data());
        EXPECT_TRUE(c.engine(r).reduce(job, it, 100 + k, ptrs, c.coder(r)).ok());
      }
      c.pump(3);
    }
    c.pump();
    for (uint32_t r = 0; r < c.size(); ++r) {
      EXPECT_EQ(c.done(r).size(), sizes.size()) << "node " << r << " iteration " << it;
      for (const Done& d : c.done(r)) EXPECT_TRUE(d.status.ok()) << d.status.toString();
      c.done(r).clear();
    }
  }
}

// The specs of keys 100, 101, ... of `sizes` under one codec and policy.
inline std::vector<TensorSpec> specsOf(const std::vector<uint64_t>& sizes, compress::CodecSpec codec,
                                       ReductionPolicy policy) {
  std::vector<TensorSpec> specs;
  for (size_t k = 0; k < sizes.size(); ++k) specs.push_back({100 + k, sizes[k], -static_cast<int32_t>(k), codec, policy});
  return specs;
}

// Declares the job "policy-job" and runs `iterations` of it from the first (runIterations).
inline Seen runPolicy(Cluster& c, uint32_t local, const std::vector<uint64_t>& sizes, int iterations,
                      compress::CodecSpec codec, ReductionPolicy policy,
                      float (*value)(uint32_t, uint64_t, uint64_t, uint64_t) = valueOf) {
  const uint64_t job = jobIdOf("policy-job");
  for (uint32_t r = 0; r < c.size(); ++r) EXPECT_TRUE(c.engine(r).declareJob(job, specsOf(sizes, codec, policy)).ok());
  Seen seen;
  runIterations(c, job, local, sizes, 1, iterations, seen, value);
  return seen;
}

// Runs `iterations` of every key on every node with `local` trainers per node (runPolicy,
// default policy); checks every trainer's buffer against the exact average within
// `tolerance` (absolute). `results`, when given, gets what the trainers saw, by iteration
// then key.
inline void runAndCheck(Cluster& c, uint32_t local, const std::vector<uint64_t>& sizes, int iterations, double tolerance,
                        const std::string& codec = "", std::vector<std::vector<float>>* results = nullptr) {
  const Seen seen = runPolicy(c, local, sizes, iterations, {codec, {}}, {});
  const uint32_t world = c.size() * local;
  for (int it = 1; it <= iterations; ++it) {
    const auto& buffers = seen[it - 1];
    for (size_t k = 0; k < sizes.size(); ++k)
      for (uint64_t i = 0; i < sizes[k]; ++i) {
        double expected = 0;
        for (uint32_t t = 0; t < world; ++t) expected += valueOf(t, it, 100 + k, i);
        expected /= world;
        const float first = buffers[0][0][k][i];
        ASSERT_NEAR(first, expected, tolerance) << "key " << k << " i " << i << " iteration " << it;
        for (uint32_t r = 0; r < c.size(); ++r)
          for (uint32_t l = 0; l < local; ++l)
            ASSERT_EQ(buffers[r][l][k][i], first) << "every trainer must see the same bytes";
      }
    if (results != nullptr)
      for (const auto& b : buffers[0][0]) results->push_back(b);
  }
}

inline EngineOptions smallSlices() {
  EngineOptions o;
  o.slice_elements = 1000;
  return o;
}

// Two nodes declare the same tensor (key 5, 4000 elements) with what `at0` and `at1` say
// and reduce it: the slices are refused as bad messages and neither node completes (the
// deadline would fail them). Returns the last error each recorded, node 0's then node 1's,
// joined by " | ".
inline std::string refusedWhenDeclaredApart(const TensorSpec& at0, const TensorSpec& at1) {
  Cluster c(2, smallSlices());
  const uint64_t job = jobIdOf("declared-apart");
  EXPECT_TRUE(c.engine(0).declareJob(job, {at0}).ok());
  EXPECT_TRUE(c.engine(1).declareJob(job, {at1}).ok());
  std::vector<float> a(4000, 1.0f), b(4000, 3.0f);
  EXPECT_TRUE(c.engine(0).reduce(job, 1, 5, {a.data()}).ok());
  EXPECT_TRUE(c.engine(1).reduce(job, 1, 5, {b.data()}).ok());
  c.pump();
  EXPECT_GT(c.engine(0).counters().bad_messages + c.engine(1).counters().bad_messages, 0u);
  EXPECT_TRUE(c.done(0).empty()) << "never completes wrongly";
  EXPECT_TRUE(c.done(1).empty());
  std::string why;
  for (uint32_t r = 0; r < 2; ++r) {
    const auto last = c.engine(r).stats().health().snapshot().last_error;
    why += (r ? " | " : "") + (last ? last->message : std::string("none"));
  }
  return why;
}

}  // namespace gcagent::agent

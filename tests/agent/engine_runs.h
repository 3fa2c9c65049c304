// Runs of N engines checked against a reference computed apart, shared by the engine's tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "agent/reduction_engine.h"
#include "tests/agent/engine_cluster.h"

namespace gcagent::agent {

// A trainer's gradient element, in [-1, 1] in steps of 0.001: a hash of where it is.
inline float valueOf(uint32_t trainer, uint64_t iteration, uint64_t key, uint64_t i) {
  uint64_t x = (trainer * 1000003ull) ^ (iteration * 7919ull) ^ (key * 104729ull) ^ (i * 2654435761ull);
  x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull;
  return static_cast<float>(static_cast<int64_t>(x >> 40) % 2001 - 1000) / 1000.0f;
}

// Runs `iterations` of every key on every node with `local` trainers per node; checks every
// trainer's buffer against the exact average within `tolerance` (absolute). `results`, when
// given, gets what the trainers saw, by iteration then key.
inline void runAndCheck(Cluster& c, uint32_t local, const std::vector<uint64_t>& sizes, int iterations, double tolerance,
                 const std::string& codec = "", std::vector<std::vector<float>>* results = nullptr) {
  const uint64_t job = jobIdOf("test-job");
  std::vector<TensorSpec> specs;
  for (size_t k = 0; k < sizes.size(); ++k) specs.push_back({100 + k, sizes[k], -static_cast<int32_t>(k), {codec, {}}, {}});
  for (uint32_t r = 0; r < c.size(); ++r) ASSERT_TRUE(c.engine(r).declareJob(job, specs).ok());
  const uint32_t world = c.size() * local;
  // buffers[node][local][key]
  std::vector<std::vector<std::vector<std::vector<float>>>> buffers(c.size());
  for (int it = 1; it <= iterations; ++it) {
    for (uint32_t r = 0; r < c.size(); ++r) {
      buffers[r].assign(local, {});
      for (uint32_t l = 0; l < local; ++l)
        for (size_t k = 0; k < sizes.size(); ++k) {
          std::vector<float> v(sizes[k]);
          for (uint64_t i = 0; i < sizes[k]; ++i) v[i] = valueOf(r * local + l, it, 100 + k, i);
          buffers[r][l].push_back(std::move(v));
        }
    }
    // Nodes submit in different orders so owners see contributions before their own.
    for (uint32_t step = 0; step < c.size(); ++step) {
      uint32_t r = (step + static_cast<uint32_t>(it)) % c.size();
      for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<float*> ptrs;
        for (uint32_t l = 0; l < local; ++l) ptrs.push_back(buffers[r][l][k].data());
        ASSERT_TRUE(c.engine(r).reduce(job, it, 100 + k, ptrs, c.coder(r)).ok());
      }
      c.pump(3);
    }
    c.pump();
    for (uint32_t r = 0; r < c.size(); ++r) {
      ASSERT_EQ(c.done(r).size(), sizes.size()) << "node " << r << " iteration " << it;
      for (const Done& d : c.done(r)) EXPECT_TRUE(d.status.ok()) << d.status.toString();
      c.done(r).clear();
    }
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
      for (auto& b : buffers[0][0]) results->push_back(std::move(b));
  }
}

inline EngineOptions smallSlices() {
  EngineOptions o;
  o.slice_elements = 1000;
  return o;
}

}  // namespace gcagent::agent

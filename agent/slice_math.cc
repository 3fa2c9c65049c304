#include "agent/slice_math.h"

namespace gcagent::agent {

void addInto(float* __restrict acc, const float* __restrict in, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) acc[i] += in[i];
}

void addAndScale(float* __restrict out, const float* __restrict in, uint64_t n, float scale) {
  for (uint64_t i = 0; i < n; ++i) out[i] = (out[i] + in[i]) * scale;
}

}  // namespace gcagent::agent

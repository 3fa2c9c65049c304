#include "agent/coding/slice_math.h"

namespace gcagent::agent {

void addInto(float* __restrict acc, const float* __restrict in, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) acc[i] += in[i];
}

void addAndDivide(float* __restrict out, const float* __restrict in, uint64_t n, float divisor) {
  for (uint64_t i = 0; i < n; ++i) out[i] = (out[i] + in[i]) / divisor;
}

void divideBy(float* p, uint64_t n, float divisor) {
  for (uint64_t i = 0; i < n; ++i) p[i] /= divisor;
}

}  // namespace gcagent::agent

#include "agent/slice_math.h"

#include <cstring>

namespace gcagent::agent {

void addInto(float* __restrict acc, const float* __restrict in, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) acc[i] += in[i];
}

void addAndScale(float* __restrict out, const float* __restrict in, uint64_t n, float scale) {
  for (uint64_t i = 0; i < n; ++i) out[i] = (out[i] + in[i]) * scale;
}

void scaleInPlace(float* x, uint64_t n, float scale) {
  for (uint64_t i = 0; i < n; ++i) x[i] *= scale;
}

void scaledFromBytes(float* __restrict out, const std::byte* __restrict bytes, uint64_t n, float scale) {
  for (uint64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, bytes + 4 * i, 4);
    out[i] = v * scale;
  }
}

}  // namespace gcagent::agent

#include "agent/coding/slice_math.h"

#include <cstring>

namespace gcagent::agent {

void addInto(float* __restrict acc, const float* __restrict in, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) acc[i] += in[i];
}

void addAndDivide(float* __restrict out, const float* __restrict in, uint64_t n, float divisor) {
  for (uint64_t i = 0; i < n; ++i) out[i] = (out[i] + in[i]) / divisor;
}

bool allFinite(const float* p, uint64_t n) {
  // The exponent bits all set, of every element at once (no early exit: the loop vectorises).
  uint32_t all_ones = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    all_ones |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return all_ones == 0;
}

void divideBy(float* p, uint64_t n, float divisor) {
  for (uint64_t i = 0; i < n; ++i) p[i] /= divisor;
}

}  // namespace gcagent::agent

// The engine's element-wise passes over fp32 slices (the node's local sum), kept in one file
// that is built with full vectorisation: at the project's -O2, GCC 12 leaves such loops
// scalar, and the averaging loop that used to live in the engine took a fifth of an agent's
// CPU on a 2bit run.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace gcagent::agent {

// acc[i] += in[i]
void addInto(float* acc, const float* in, uint64_t n);
// out[i] = (out[i] + in[i]) / divisor: an average is one division of the sum
void addAndDivide(float* out, const float* in, uint64_t n, float divisor);
// p[i] /= divisor
void divideBy(float* p, uint64_t n, float divisor);
// No p[i] is an infinity or a NaN (an fp16 overflow step's gradient).
bool allFinite(const float* p, uint64_t n);

// Whether x * (1 / divisor) is x / divisor bit for bit for every float x: a positive power of
// two whose reciprocal is a normal float (both are then the one rounding of the same value).
inline bool exactReciprocal(float divisor) {
  int exponent = 0;
  return divisor > 0 && std::frexp(divisor, &exponent) == 0.5f && exponent <= 127;
}

}  // namespace gcagent::agent

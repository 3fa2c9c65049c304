// The engine's element-wise passes over fp32 slices, kept in one file that is built with
// full vectorisation (at the project's -O2, GCC 12 left these loops scalar: a fifth of the
// agent's CPU on a 2bit run went to the averaging loop alone).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gcagent::agent {

// acc[i] += in[i]
void addInto(float* acc, const float* in, uint64_t n);
// out[i] = (out[i] + in[i]) * scale
void addAndScale(float* out, const float* in, uint64_t n, float scale);
// x[i] *= scale
void scaleInPlace(float* x, uint64_t n, float scale);
// out[i] = (fp32 at bytes + 4 i) * scale; `bytes` need not be aligned
void scaledFromBytes(float* out, const std::byte* bytes, uint64_t n, float scale);

}  // namespace gcagent::agent

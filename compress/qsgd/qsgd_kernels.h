// qsgd's encoding loop over one bucket, for the baseline ISA (qsgd.cc) and for AVX2
// (qsgd_avx2.cc); both give the levels and residuals of qsgd_math.h bit for bit, the
// random draws included.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/cpu/isa.h"

namespace gcagent::compress::qsgd {

// Levels of elements [begin, end) of one bucket of the given norm into level[begin ..];
// with error feedback (r non-null) r keeps what the levels did not carry.
using EncodeFn = void (*)(const float* g, float* r, int8_t* level, size_t begin, size_t end,
                          float norm, int32_t levels, uint64_t stream);

struct Kernels {
  EncodeFn encode;           // x = g
  EncodeFn encode_feedback;  // x = g + r
};

const Kernels& kernels();

extern const Kernels kGenericKernels;
#if GC_CPU_X86
extern const Kernels kAvx2Kernels;
#endif

}  // namespace gcagent::compress::qsgd

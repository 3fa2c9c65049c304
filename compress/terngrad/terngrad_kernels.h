// terngrad's encoding loop, for the baseline ISA (terngrad.cc) and for AVX2
// (terngrad_avx2.cc); both give the codes and residuals of terngrad_math.h bit for bit,
// the random draws included.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/cpu/isa.h"
#include "compress/terngrad/terngrad_math.h"

namespace gcagent::compress::terngrad {

// Codes of elements [begin, end) into codes[begin/4 ..] (begin a multiple of 4, end one too
// or the slice's end); with error feedback (r non-null) r keeps what the codes did not carry.
using EncodeFn = void (*)(const float* g, float* r, uint8_t* codes, size_t begin, size_t end,
                          Scaler q, uint64_t stream);

struct Kernels {
  EncodeFn encode;           // x = g
  EncodeFn encode_feedback;  // x = g + r
};

const Kernels& kernels();

extern const Kernels kGenericKernels;
#if GC_CPU_X86
extern const Kernels kAvx2Kernels;
#endif

}  // namespace gcagent::compress::terngrad

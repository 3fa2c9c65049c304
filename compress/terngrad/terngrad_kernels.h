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

// The slice statistics sum fixed blocks and then combine the blocks in order, so s does not
// depend on how the slice is split over threads.
inline constexpr size_t kStatsBlock = 4096;

struct BlockStats {
  double sum_squares = 0.0;
  float max_magnitude = 0.0f;
};

// out[b] = the statistics of x over block b, for the blocks of [begin, end) (begin a
// multiple of kStatsBlock, end one too or the slice's end). Four lanes, lane j taking
// elements 4m + j in order and the block's last n % 4 going to lane 0; the squares sum as
// (lane0 + lane1) + (lane2 + lane3).
using BlockStatsFn = void (*)(const float* g, const float* r, size_t begin, size_t end,
                              BlockStats* out);

struct Kernels {
  EncodeFn encode;           // x = g
  EncodeFn encode_feedback;  // x = g + r
  BlockStatsFn block_stats;
  BlockStatsFn block_stats_feedback;
};

const Kernels& kernels();

extern const Kernels kGenericKernels;
#if GC_CPU_X86
extern const Kernels kAvx2Kernels;
#endif

}  // namespace gcagent::compress::terngrad

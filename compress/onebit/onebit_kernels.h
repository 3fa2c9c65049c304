// The onebit loops, for the baseline ISA (onebit.cc) and for AVX2 (onebit_avx2.cc); both
// give the scale, bits and residuals of onebit_math.h bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/cpu/isa.h"

namespace gcagent::compress::onebit {

// The scale sums fixed blocks of this many elements and then adds the block sums in order,
// so it is the same however the slice is split over threads.
inline constexpr size_t kSumBlock = 4096;

struct Kernels {
  // partial[b] = sum |g + e| over block b, for the blocks of [begin, end) (begin a multiple
  // of kSumBlock, end one too or the slice's end). Each block sums in four double lanes,
  // lane j taking elements 4m + j in order and the block's last n % 4 going to lane 0, then
  // (lane0 + lane1) + (lane2 + lane3): a fixed order, so the sum is reproducible.
  void (*block_sums)(const float* g, const float* e, size_t begin, size_t end, double* partial);
  // The sign bits of x = g + e for elements [begin, end) (begin a multiple of 8) into
  // bits[begin/8 ..], and e = x - decoded.
  void (*encode)(const float* g, float* e, uint8_t* bits, size_t begin, size_t end, float scale);
  // acc[i] += the value of element i's bit, for elements [begin, end) (begin a multiple of 8).
  void (*decode_add)(const uint8_t* bits, float* acc, size_t begin, size_t end, float scale);
};

const Kernels& kernels();

extern const Kernels kGenericKernels;
#if GC_CPU_X86
extern const Kernels kAvx2Kernels;
#endif

}  // namespace gcagent::compress::onebit

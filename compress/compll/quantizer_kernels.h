// A quantizer's CPU loops for one instruction set, made from its definition by
// cpu/quantizer-inl.h, and the slice statistics of cpu/slice_stats-inl.h: for the build's
// baseline (cpu/quantizer_kernels.cc) and, on x86, for AVX2 (cpu/quantizer_kernels_avx2.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/compll/slice_stats.h"
#include "compress/cpu/isa.h"

namespace gcagent::compress::compll {

template <class Def>
struct QuantizerKernels {
  using Params = typename Def::Params;
  // Codes of g[i] + r[i] for i in [begin, end) into their bytes, updating r[i] (r null: no
  // residual, x = g + 0); `scale` and `stream` are the slice's (ignored by a definition that
  // is not scaled or not stochastic).
  void (*encode)(const float* g, float* r, uint8_t* codes, size_t begin, size_t end, const Params& p, float scale,
                 uint64_t stream);
  // acc[i] += element i's value.
  void (*decode_add)(const uint8_t* codes, float* acc, size_t begin, size_t end, const Params& p, float scale);
  // out[i] = element i's value times factor (not multiplied when factor is 1).
  void (*decode)(const uint8_t* codes, float* out, size_t begin, size_t end, const Params& p, float scale,
                 float factor);
  // Block-scaled definitions only (null for the others), over the blocks of [begin, end): begin
  // a block edge, end one too or the slice's end. The blocks' scales (block b's at scales + b
  // * Scale::kBytes), or the first block whose x is not finite (then SIZE_MAX is not returned
  // and the scales are partly written); then the codes with those scales, r updated; and the
  // values, added to out or stored times factor.
  size_t (*block_scales)(const float* g, const float* r, uint8_t* scales, size_t begin, size_t end, const Params& p,
                         uint64_t stream);
  void (*encode_blocks)(const float* g, float* r, const uint8_t* scales, uint8_t* codes, size_t begin, size_t end,
                        const Params& p, uint64_t stream);
  void (*decode_blocks)(const uint8_t* scales, const uint8_t* codes, float* out, size_t begin, size_t end,
                        const Params& p, uint64_t stream, float factor, bool add);
};

// out[b] = the statistics `which` names (Stat bits) of x = g + r (r null: g + 0) over block b,
// for the blocks of [begin, end) (begin a multiple of kStatsBlock, end one too or the slice's
// end).
using BlockStatsFn = void (*)(const float* g, const float* r, size_t begin, size_t end, SliceStats* out);

BlockStatsFn baselineBlockStats(unsigned which);
BlockStatsFn avx2BlockStats(unsigned which);

inline BlockStatsFn blockStatsKernel(cpu::Isa isa, unsigned which) {
#if GC_CPU_X86
  if (isa == cpu::Isa::kAvx2) return avx2BlockStats(which);
#endif
  (void)isa;
  return baselineBlockStats(which);
}

}  // namespace gcagent::compress::compll

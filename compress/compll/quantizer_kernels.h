// A quantizer's CPU loops for one instruction set, made from its definition by
// cpu/quantizer-inl.h: for the build's baseline (cpu/quantizer_kernels.cc) and, on x86, for
// AVX2 (cpu/quantizer_kernels_avx2.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/cpu/isa.h"

namespace gcagent::compress::compll {

template <class Def>
struct QuantizerKernels {
  using Params = typename Def::Params;
  // Codes of g[i] + r[i] for i in [begin, end) into their bytes, updating r[i].
  void (*encode)(const float* g, float* r, uint8_t* codes, size_t begin, size_t end, const Params& p);
  // acc[i] += element i's value.
  void (*decode_add)(const uint8_t* codes, float* acc, size_t begin, size_t end, const Params& p);
  // out[i] = element i's value times scale (not multiplied when scale is 1).
  void (*decode)(const uint8_t* codes, float* out, size_t begin, size_t end, const Params& p, float scale);
};

// Defined for every definition by the two files above.
template <class Def>
const QuantizerKernels<Def>& baselineQuantizerKernels();
template <class Def>
const QuantizerKernels<Def>& avx2QuantizerKernels();

// The loops for `isa`.
template <class Def>
const QuantizerKernels<Def>& quantizerKernels(cpu::Isa isa) {
#if GC_CPU_X86
  if (isa == cpu::Isa::kAvx2) return avx2QuantizerKernels<Def>();
#endif
  (void)isa;
  return baselineQuantizerKernels<Def>();
}

}  // namespace gcagent::compress::compll

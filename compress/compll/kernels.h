// Every definition's CPU loops for one instruction set: a quantizer's (quantizer_kernels.h) or
// a selecting definition's (selector_kernels.h), made by cpu/quantizer_kernels.cc for the
// build's baseline and by cpu/quantizer_kernels_avx2.cc, on x86, for AVX2.
#pragma once

#include <type_traits>

#include "compress/compll/definition.h"
#include "compress/compll/quantizer_kernels.h"
#include "compress/compll/selector_kernels.h"
#include "compress/cpu/isa.h"

namespace gcagent::compress::compll {

template <class Def>
using KernelsOf = std::conditional_t<Selecting<Def>, SelectorKernels<Def>, QuantizerKernels<Def>>;

// Defined for every definition by the two files above.
template <class Def>
const KernelsOf<Def>& baselineKernels();
template <class Def>
const KernelsOf<Def>& avx2Kernels();

// The loops for `isa`.
template <class Def>
const KernelsOf<Def>& kernelsFor(cpu::Isa isa) {
#if GC_CPU_X86
  if (isa == cpu::Isa::kAvx2) return avx2Kernels<Def>();
#endif
  (void)isa;
  return baselineKernels<Def>();
}

}  // namespace gcagent::compress::compll

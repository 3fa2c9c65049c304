// The element passes of the sparse codecs' selection, for the baseline ISA
// (select_kernels.cc) and for AVX2 (select_avx2.cc): both give the same indices and state
// bit for bit. Each pass appends, in ascending order, the index of every element whose
// magnitude key (sparse_math.h) reaches `key`, writing to out[0..] and returning how many.
// `out` must have room for end - begin entries; the loops may write anywhere in that room
// (the vector ones store whole groups of 8), never past it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/cpu/isa.h"

namespace gcagent::compress::sparse {

struct Kernels {
  // Elements [begin, end) of x.
  size_t (*collect)(const float* x, size_t begin, size_t end, uint32_t key, uint32_t* out);
};

// The kernels for the active ISA.
const Kernels& kernels();

// The portable loops, also the reference the AVX2 ones are tested against.
extern const Kernels kGenericKernels;
#if GC_CPU_X86
extern const Kernels kAvx2Kernels;
#endif

}  // namespace gcagent::compress::sparse

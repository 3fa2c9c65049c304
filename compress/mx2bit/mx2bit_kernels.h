// The 2-bit loops over elements [begin, end) of a slice, for the baseline ISA (mx2bit.cc)
// and for AVX2 (mx2bit_avx2.cc). Both give the bytes and residuals of mx2bit_math.h bit
// for bit. `begin` is a multiple of 4 (chunk edges never split a byte); `end` is a multiple
// of 4 or the end of the slice.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compress/cpu/isa.h"

namespace gcagent::compress::mx2bit {

struct Kernels {
  // Quantizes g[i] + r[i] into the code of element i (byte i>>2), updating r[i].
  void (*encode)(const float* g, float* r, uint8_t* dst, size_t begin, size_t end, float t);
  // acc[i] += the value of element i's code.
  void (*decode_add)(const uint8_t* src, float* acc, size_t begin, size_t end, float t);
  // out[i] = the value of element i's code.
  void (*decode)(const uint8_t* src, float* out, size_t begin, size_t end, float t);
};

// The kernels for the active ISA.
const Kernels& kernels();

#if GC_CPU_X86
extern const Kernels kAvx2Kernels;
#endif

}  // namespace gcagent::compress::mx2bit

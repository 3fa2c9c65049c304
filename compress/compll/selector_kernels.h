// A selecting definition's CPU pass for one instruction set, made from its definition by
// cpu/selector-inl.h: for the build's baseline (cpu/quantizer_kernels.cc) and, on x86, for
// AVX2 (cpu/quantizer_kernels_avx2.cc). Both give the same indices and state bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gcagent::compress::compll {

template <class Def>
struct SelectorKernels {
  using Params = typename Def::Params;
  // The definition's update of elements [begin, end) (v the residual, m the moments: null
  // unless the definition keeps them), then the ascending indices of the elements whose |v|
  // key (sparse::magnitudeKey) reaches `key` written to out[0..], and their count; a key above
  // 0x7fffffff collects none. `out` has room for end - begin entries, and whole vectors of it
  // may be written.
  size_t (*update_collect)(const float* g, float* v, float* m, size_t begin, size_t end, const Params& p, uint32_t key,
                           uint32_t* out);
};

// Nothing passes this key: an update alone.
inline constexpr uint32_t kCollectNone = 0x80000000u;

}  // namespace gcagent::compress::compll

// Marks element math that the CPU loops and the CUDA kernels share, so CPU tests check the
// arithmetic the GPU runs. Headers using it include nothing but <cstdint> and <cmath>.
#pragma once

#if defined(__CUDACC__)
#define GC_HD __host__ __device__ __forceinline__
#else
#define GC_HD inline
#endif

#include <cstddef>
#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <cstring>
#endif

namespace gcagent::compress {

GC_HD uint32_t bitsOf(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

GC_HD float floatOf(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace gcagent::compress

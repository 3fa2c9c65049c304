// One kernel per codec that exercises its __host__ __device__ element math. Built, never
// launched: the codec kernels proper arrive with the GPU path.
#include "compress/bf16/bf16_math.h"
#include "compress/fp16/fp16_math.h"
#include "compress/mx1bit/mx1bit_math.h"
#include "compress/mx2bit/mx2bit_math.h"

namespace gcagent::compress {

__global__ void castMathCheck(const float* in, float* out, size_t n) {
  const size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = fp16::toFloat(fp16::fromFloat(in[i])) + bf16::toFloat(bf16::fromFloat(in[i]));
}

__global__ void mxMathCheck(const float* g, float* r, uint8_t* out2, uint8_t* out1, size_t n, float t) {
  const size_t b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < (n + 3) / 4) out2[b] = mx2bit::encodeByte(g, r, n, b, t);
  if (b < (n + 7) / 8) out1[b] = mx1bit::encodeByte(g, r, n, b, t);
}

}  // namespace gcagent::compress

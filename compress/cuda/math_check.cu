// One kernel per codec that exercises its __host__ __device__ element math. Built, never
// launched: the codec kernels proper arrive with the GPU path.
#include "compress/bf16/bf16_math.h"
#include "compress/fp16/fp16_math.h"

namespace gcagent::compress {

__global__ void castMathCheck(const float* in, float* out, size_t n) {
  const size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = fp16::toFloat(fp16::fromFloat(in[i])) + bf16::toFloat(bf16::fromFloat(in[i]));
}

}  // namespace gcagent::compress

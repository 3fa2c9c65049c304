// Element math of topk, threshold and randomk under nvcc (dgc's is its definition's, built
// by compll/cuda/quantizer.cu). Built, never launched.
#include "compress/randomk/randomk_math.h"
#include "compress/sparse/sparse_math.h"

namespace gcagent::compress {

// What topk, threshold and dgc select with: magnitude keys against a cut, the lowered cut,
// and the sample draw.
__global__ void sparseSelectMathCheck(const float* x, uint32_t* passed, uint64_t* sampled, size_t n,
                                      uint32_t cut, uint64_t seed, uint64_t key, uint32_t slice,
                                      uint64_t step) {
  const size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint64_t stream = rng::streamSeed(seed, key, slice, step);
  passed[i] = sparse::magnitudeKey(x[i]) >= cut ? 1u : sparse::scaledKey(cut, 0.8f);
  sampled[i] = sparse::sampleIndex(stream, i, n) ^ rng::mix64(i);
}

__global__ void randomkMathCheck(uint32_t* picks, float* scale, size_t n, size_t k,
                                 uint64_t stream) {
  const size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < k) picks[i] = randomk::floydPick(stream, n - k + i);
  if (i == 0) *scale = randomk::unbiasedScale(n, k);
}

}  // namespace gcagent::compress

// Element math of qsgd (and the counter-based generator it draws from) under nvcc. Built,
// never launched.
#include "compress/qsgd/qsgd_math.h"
#include "compress/random_math.h"

namespace gcagent::compress {

// One thread per element of a bucket with the given norm, with and without error feedback.
__global__ void qsgdMathCheck(const float* g, float* r, int8_t* levels_out, float* out, size_t n,
                              size_t bucket, float norm, int32_t levels, uint64_t stream) {
  const size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float unit = qsgd::unitOf(norm, levels);
  levels_out[i] = r != nullptr ? qsgd::encodeElement<true>(g, r, i, norm, unit, levels, stream)
                               : qsgd::encodeElement<false>(g, r, i, norm, unit, levels, stream);
  const int32_t level = qsgd::quantize(inputAt<false>(g, r, i), norm, levels,
                                       rng::uniform01(stream, i));
  out[i] = qsgd::isValidLevel(level, levels)
               ? qsgd::dequantize(levels_out[i], unit) + qsgd::magnitude(g[i])
               : static_cast<float>(qsgd::encodedBytes(n, bucket) + qsgd::bucketCount(n, bucket)) +
                     static_cast<float>(rng::mix64(i) >> 40);
}

}  // namespace gcagent::compress

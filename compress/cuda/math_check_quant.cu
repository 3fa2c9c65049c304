// Element math of onebit's hand-written version (kept for the benchmark) and qsgd (and the
// counter-based generator it draws from) under nvcc. Built, never launched.
#include "compress/onebit/onebit_math.h"
#include "compress/qsgd/qsgd_math.h"
#include "compress/random_math.h"

namespace gcagent::compress {

// One thread per byte of sign bits, then the decode of element b.
__global__ void onebitMathCheck(const float* g, float* e, uint8_t* bits, float* out, size_t n,
                                float scale) {
  const size_t b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= (n + 7) / 8) return;
  const size_t count = n - 8 * b < 8 ? n - 8 * b : 8;
  bits[b] = onebit::encodeByte(g, e, b, count, scale);
  out[b] = onebit::dequantize(onebit::bitAt(bits, b), scale) +
           onebit::magnitude(g[b]) + static_cast<float>(onebit::encodedBytes(n));
}

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

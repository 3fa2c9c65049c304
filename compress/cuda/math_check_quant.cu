// Element math of onebit, terngrad and qsgd (and the counter-based generator they draw
// from) under nvcc. Built, never launched: the codec kernels proper arrive with the GPU path.
#include "compress/onebit/onebit_math.h"
#include "compress/qsgd/qsgd_math.h"
#include "compress/random_math.h"
#include "compress/terngrad/terngrad_math.h"

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

// One thread per byte of 2-bit codes, with and without error feedback.
__global__ void terngradMathCheck(const float* g, float* r, uint8_t* codes, float* out, size_t n,
                                  float bound, float s, uint64_t seed, uint64_t key,
                                  uint32_t slice, uint64_t step) {
  const size_t b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= (n + 3) / 4) return;
  const uint64_t stream = rng::streamSeed(seed, key, slice, step);
  const size_t count = n - 4 * b < 4 ? n - 4 * b : 4;
  const terngrad::Scaler q{bound, s};
  codes[b] = r != nullptr ? terngrad::encodeByte<true>(g, r, b, count, q, stream)
                          : terngrad::encodeByte<false>(g, r, b, count, q, stream);
  const uint32_t code = (codes[b] >> terngrad::shiftOf(b)) & 3u;
  out[b] = terngrad::dequantize(code, s) + terngrad::clip(g[b], bound) +
           inputAt<false>(g, r, b) + terngrad::magnitude(g[b]) +
           static_cast<float>(terngrad::quantize(g[b], s, rng::uniform01(stream, b))) +
           static_cast<float>(terngrad::encodedBytes(n));
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

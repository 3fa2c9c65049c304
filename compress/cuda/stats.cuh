// Slice statistics computed in exactly the CPU codecs' order, so the GPU gets the same bits:
// the CPU sums a run of elements in four double lanes (lane j takes elements j, j+4, ... while
// a whole group of four remains, lane 0 then takes the tail in order), adds the lanes as
// (l0 + l1) + (l2 + l3), and adds the runs' sums in order. A thread block stages a run in
// shared memory with coalesced loads and four threads run the lanes from there
// (compll/cuda/quantizer.cu, qsgd.cu).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gcagent::compress::cuda {

template <class F>
__device__ __forceinline__ double laneSum(size_t begin, size_t end, uint32_t lane, F term) {
  double sum = 0.0;
  const size_t groups = (end - begin) / 4;
  for (size_t q = 0; q < groups; ++q) sum += term(begin + 4 * q + lane);
  if (lane == 0)
    for (size_t i = begin + 4 * groups; i < end; ++i) sum += term(i);
  return sum;
}

__device__ __forceinline__ double combineLanes(const double* lanes) {
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
}

inline constexpr unsigned kStageThreads = 256;

// OR of v over groups of `width` consecutive lanes (a power of two up to 32); every lane of
// the warp must call it. Packs per-element bits into whole 32-bit words.
__device__ __forceinline__ uint32_t orOverLanes(uint32_t v, unsigned width) {
  for (unsigned offset = 1; offset < width; offset <<= 1) v |= __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Byte b of a little-endian 32-bit word sits at bit 8 * b.
__device__ __forceinline__ uint32_t byteShift(size_t byte_index) {
  return 8u * static_cast<uint32_t>(byte_index & 3u);
}

}  // namespace gcagent::compress::cuda

// Slice statistics computed in exactly the CPU codecs' order, so the GPU gets the same bits:
// the CPU sums a run of elements in four double lanes (lane j takes elements j, j+4, ... while
// a whole group of four remains, lane 0 then takes the tail in order) and adds the lanes as
// (l0 + l1) + (l2 + l3). Here one thread runs one lane, so a run costs a quarter of its length
// in dependent adds instead of all of it.
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

}  // namespace gcagent::compress::cuda

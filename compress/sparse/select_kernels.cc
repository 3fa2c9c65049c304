#include "compress/sparse/select_kernels.h"

#include <algorithm>

#include "compress/sparse/sparse_math.h"

namespace gcagent::compress::sparse {
namespace {

// Writes every index and advances only past the ones that pass: no branch to mispredict
// on random data.
size_t collectGeneric(const float* x, size_t begin, size_t end, uint32_t key, uint32_t* out) {
  size_t count = 0;
  for (size_t i = begin; i < end; ++i) {
    out[count] = static_cast<uint32_t>(i);
    count += magnitudeKey(x[i]) >= key ? 1 : 0;
  }
  return count;
}

// The update runs over blocks small enough to stay in L1 for the collect that follows; the
// update loop alone is what the compiler vectorizes.
constexpr size_t kBlock = 256;

size_t accumulateCollectGeneric(const float* __restrict g, float* __restrict r, size_t begin,
                                size_t end, uint32_t key, uint32_t* out) {
  size_t count = 0;
  for (size_t b = begin; b < end; b += kBlock) {
    const size_t stop = std::min(end, b + kBlock);
    for (size_t i = b; i < stop; ++i) r[i] += g[i];
    count += collectGeneric(r, b, stop, key, out + count);
  }
  return count;
}

}  // namespace

const Kernels kGenericKernels = {collectGeneric, accumulateCollectGeneric};

const Kernels& kernels() {
#if GC_CPU_X86
  if (cpu::useAvx2()) return kAvx2Kernels;
#endif
  return kGenericKernels;
}

}  // namespace gcagent::compress::sparse

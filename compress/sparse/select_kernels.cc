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

}  // namespace

const Kernels kGenericKernels = {collectGeneric};

const Kernels& kernels() {
#if GC_CPU_X86
  if (cpu::useAvx2()) return kAvx2Kernels;
#endif
  return kGenericKernels;
}

}  // namespace gcagent::compress::sparse

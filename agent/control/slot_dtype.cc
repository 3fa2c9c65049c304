#include "agent/control/slot_dtype.h"

#include <cstring>

#include "compress/cpu/cast_kernels.h"

namespace gcagent::agent {
namespace {

// The cast codecs' loops (compress/cpu/cast_kernels.h): their encode without a residual is
// the rounding to nearest even, their decode at scale 1 the exact widening (-0 kept).
const compress::CastKernels& kernelsOf(shm::protocol::DType dtype) {
  return compress::castKernels(dtype == shm::protocol::DType::kFloat16 ? compress::CastFormat::kFp16
                                                                       : compress::CastFormat::kBf16);
}

}  // namespace

void widenSlot(shm::protocol::DType dtype, const std::byte* from, float* to, uint64_t elements) {
  if (dtype == shm::protocol::DType::kFloat32) return std::memcpy(to, from, elements * sizeof(float)), void();
  kernelsOf(dtype).decode(from, to, 0, elements, 1.0f);
}

void narrowSlot(shm::protocol::DType dtype, const float* from, std::byte* to, uint64_t elements) {
  if (dtype == shm::protocol::DType::kFloat32) return std::memcpy(to, from, elements * sizeof(float)), void();
  kernelsOf(dtype).encode(from, nullptr, to, 0, elements);
}

}  // namespace gcagent::agent

// bfloat16 and float16 slots (shm/protocol.h DType). The engine reduces in fp32, so a narrow
// slot has an fp32 twin in the agent: a submit widens the slot into it, exactly, and the
// completion rounds the result back into the slot, to nearest even. The trainer keeps its
// gradients in their own type (no fp32 copy in the shim); the residuals stay fp32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shm/protocol.h"

namespace gcagent::agent {

void widenSlot(shm::protocol::DType dtype, const std::byte* from, float* to, uint64_t elements);
void narrowSlot(shm::protocol::DType dtype, const float* from, std::byte* to, uint64_t elements);

}  // namespace gcagent::agent

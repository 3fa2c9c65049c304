// The LocalCoders of the agent's GPUs: the CUDA coder device on each GPU's stream, in builds
// with CUDA. In builds without, no factory: device slots are staged through the host.
#pragma once

#include "agent/coding/device_path.h"
#include "agent/io.h"

namespace gcagent::agent {

// `residual_budget_bytes` per GPU.
CoderFactory gpuCoderFactory(asio::io_context& io, size_t residual_budget_bytes);

}  // namespace gcagent::agent

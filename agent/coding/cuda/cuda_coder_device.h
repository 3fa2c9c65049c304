// CoderDevice on a GPU: the GPU codecs (compress/cuda) and element kernels on device memory,
// all enqueued on one stream of the GPU's primary context. Results match the host device
// (host_coder_device.h) bit for bit. No CUDA headers here, so the agent's C++ code can make
// one.
#pragma once

#include <memory>
#include <string>

#include "agent/coding/coder_device.h"
#include "agent/io.h"
#include "common/status.h"

struct CUstream_st;  // a CUstream and a cudaStream_t are both CUstream_st*

namespace gcagent::agent {

// The device for GPU `ordinal` (CUDA runtime numbering) enqueueing on `stream` (nullptr: the
// legacy default stream); `description` (e.g. "gpu 0 (GPU-...)") is what describe() returns
// and what its errors start with. after()'s reports are posted to `io`. unavailable naming
// the cause when the GPU cannot be used.
Result<std::unique_ptr<CoderDevice>> makeCudaCoderDevice(asio::io_context& io, int ordinal, CUstream_st* stream,
                                                         std::string description);

}  // namespace gcagent::agent

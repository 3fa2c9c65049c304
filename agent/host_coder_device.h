// CoderDevice on the host: the CPU codecs on host memory. The work runs as it is enqueued;
// after() posts its report to the engine's thread, so callers see the same asynchronous
// order as on a GPU. It is how the LocalCoder runs where there is no GPU, and the reference
// the GPU device is compared with bit for bit.
#pragma once

#include <memory>

#include "agent/coder_device.h"
#include "agent/io.h"

namespace gcagent::agent {

std::unique_ptr<CoderDevice> makeHostCoderDevice(asio::io_context& io, compress::CodecEnv env = {});

}  // namespace gcagent::agent

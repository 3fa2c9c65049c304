// CoderDevice on the host: the CPU codecs on host memory, their work run on a HostStream's
// worker thread in priority order, never on the comm thread. after() posts its report to
// the comm thread, as a GPU's does. It is how the LocalCoder runs for host gradients, and
// the reference the GPU device is compared with bit for bit.
#pragma once

#include <memory>

#include "agent/coding/coder_device.h"
#include "agent/coding/host_stream.h"
#include "agent/io.h"

namespace gcagent::agent {

std::unique_ptr<CoderDevice> makeHostCoderDevice(std::shared_ptr<HostStream> stream, compress::CodecEnv env = {});
// A device on a stream of its own, reporting to `io`.
std::unique_ptr<CoderDevice> makeHostCoderDevice(asio::io_context& io, compress::CodecEnv env = {});

}  // namespace gcagent::agent

// The GPU codec factories, one per codec, named in the codec's row of compress/registry.cc. Each takes the
// parameters the CPU codec of the same name takes, already validated by it.
#pragma once

#include <memory>

#include "compress/cuda/gpu_codec.h"

namespace gcagent::compress::cuda {

Result<std::unique_ptr<GpuCodec>> makeGpuNone(const Params& params);
Result<std::unique_ptr<GpuCodec>> makeGpuFp16(const Params& params);
Result<std::unique_ptr<GpuCodec>> makeGpuBf16(const Params& params);
Result<std::unique_ptr<GpuCodec>> makeGpuQsgd(const Params& params);
Result<std::unique_ptr<GpuCodec>> makeGpuInt8(const Params& params);
Result<std::unique_ptr<GpuCodec>> makeGpuRandomk(const Params& params);

}  // namespace gcagent::compress::cuda

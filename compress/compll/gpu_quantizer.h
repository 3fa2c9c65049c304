// The GPU twin of a codec definition (cuda/quantizer.cu), for the registry's rows.
#pragma once

#include <memory>

#include "compress/cuda/gpu_codec.h"

namespace gcagent::compress::compll {

// Takes the parameters the CPU factory of the same definition accepted.
template <class Def>
Result<std::unique_ptr<compress::cuda::GpuCodec>> makeGpuDefined(const Params& params);

}  // namespace gcagent::compress::compll

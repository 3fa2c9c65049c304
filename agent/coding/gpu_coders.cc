#include "agent/coding/gpu_coders.h"

#include "agent/coding/local_coder.h"
#include "common/build_config.h"
#if GCAGENT_HAVE_CUDA
#include "agent/coding/cuda/cuda_coder_device.h"
#endif

namespace gcagent::agent {

CoderFactory gpuCoderFactory(asio::io_context& io, size_t residual_budget_bytes) {
#if GCAGENT_HAVE_CUDA
  return [&io, residual_budget_bytes](int ordinal, void* stream, const std::string& description) -> Result<std::shared_ptr<LocalCoder>> {
    GC_ASSIGN_OR_RETURN(auto device,
                        makeCudaCoderDevice(io, ordinal, static_cast<CUstream_st*>(stream), description));
    return std::make_shared<LocalCoder>(std::move(device), residual_budget_bytes);
  };
#else
  (void)io;
  (void)residual_budget_bytes;
  return nullptr;
#endif
}

}  // namespace gcagent::agent

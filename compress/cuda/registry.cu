// The GPU codecs, from the registry's rows (compress/registry.cc), and the probe for a usable GPU.
#include <cuda_runtime.h>

#include <string>

#include "common/str_cat.h"
#include "compress/cuda/codecs.h"
#include "compress/cuda/gpu_codec.h"
#include "compress/registry.h"

namespace gcagent::compress::cuda {

Status gpuAvailable() {
  // The CUDA runtime is linked statically and loads libcuda.so.1 itself on this first call:
  // a host without the driver gets an error here, never a failure to start.
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    return Status::unavailable(strCat("no GPU: ", cudaGetErrorString(err)));
  if (count == 0) return Status::unavailable("no GPU: the driver reports no CUDA device");
  return {};
}

std::vector<std::string_view> gpuCodecNames() {
  std::vector<std::string_view> names;
  for (const CodecInfo& info : codecList())
    if (info.make_gpu != nullptr) names.push_back(info.name);
  return names;
}

Result<std::unique_ptr<GpuCodec>> makeGpuCodec(std::string_view name, const Params& params) {
  // The CPU codec of the same name checks the parameters, so both reject the same input with
  // the same words.
  auto cpu = makeCodec(name, params);
  if (!cpu.ok()) return cpu.status();
  for (const CodecInfo& info : codecList()) {
    if (info.name != name || info.make_gpu == nullptr) continue;
    GC_RETURN_IF_ERROR(gpuAvailable());
    return info.make_gpu(params);
  }
  std::string known;
  for (std::string_view n : gpuCodecNames()) known = strCat(known, known.empty() ? "" : ", ", n);
  return Status::notFound(strCat("codec ", name, " has no GPU kernels; GPU codecs: ", known));
}

}  // namespace gcagent::compress::cuda

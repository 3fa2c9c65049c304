#include "compress/cuda/device_buffer.h"

#include <cuda_runtime.h>

#include "common/str_cat.h"

namespace gcagent::compress::cuda {

RawDeviceBuffer::~RawDeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

Result<RawDeviceBuffer> RawDeviceBuffer::allocate(size_t bytes) {
  RawDeviceBuffer b;
  if (bytes == 0) return Result<RawDeviceBuffer>(std::move(b));
  cudaError_t err = cudaMalloc(&b.data_, bytes);
  if (err == cudaSuccess) err = cudaMemset(b.data_, 0, bytes);
  // The zeroing runs on the legacy stream, which a non-blocking stream does not wait for:
  // finish it before the memory is handed out.
  if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
  if (err != cudaSuccess)
    return Status::resourceExhausted(
        strCat("gpu: cannot allocate ", bytes, " bytes of device memory: ", cudaGetErrorString(err)));
  b.bytes_ = bytes;
  return Result<RawDeviceBuffer>(std::move(b));
}

Status RawDeviceBuffer::upload(const void* host, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_)
    return Status::outOfRange(strCat("gpu: upload of ", bytes, " bytes at ", offset,
                                     " past a device buffer of ", bytes_));
  if (bytes == 0) return {};
  cudaError_t err =
      cudaMemcpy(static_cast<char*>(data_) + offset, host, bytes, cudaMemcpyHostToDevice);
  // From pageable memory the copy may still be landing when cudaMemcpy returns, and a
  // non-blocking stream would not wait for it.
  if (err == cudaSuccess) err = cudaStreamSynchronize(nullptr);
  if (err != cudaSuccess)
    return Status::unavailable(strCat("gpu: upload failed: ", cudaGetErrorString(err)));
  return {};
}

Status RawDeviceBuffer::download(void* host, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_)
    return Status::outOfRange(strCat("gpu: download of ", bytes, " bytes at ", offset,
                                     " past a device buffer of ", bytes_));
  if (bytes == 0) return {};
  const cudaError_t err =
      cudaMemcpy(host, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost);
  if (err != cudaSuccess)
    return Status::unavailable(strCat("gpu: download failed: ", cudaGetErrorString(err)));
  return {};
}

}  // namespace gcagent::compress::cuda

// Device memory owned by one object, for the GPU codecs' scratch space and for callers (tests,
// benchmarks) that have no CUDA headers. Copies are synchronous.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gcagent::compress::cuda {

class RawDeviceBuffer {
 public:
  RawDeviceBuffer() = default;
  RawDeviceBuffer(RawDeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  RawDeviceBuffer& operator=(RawDeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  ~RawDeviceBuffer();

  // `bytes` of device memory, zeroed; resourceExhausted naming the size when it fails.
  static Result<RawDeviceBuffer> allocate(size_t bytes);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

  Status upload(const void* host, size_t bytes, size_t offset = 0);
  Status download(void* host, size_t bytes, size_t offset = 0) const;

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// n elements of T on the device.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;

  static Result<DeviceBuffer> allocate(size_t n) {
    auto raw = RawDeviceBuffer::allocate(n * sizeof(T));
    if (!raw.ok()) return raw.status();
    DeviceBuffer b;
    b.raw_ = std::move(raw).value();
    b.size_ = n;
    return Result<DeviceBuffer>(std::move(b));
  }
  static Result<DeviceBuffer> from(std::span<const T> host) {
    auto b = allocate(host.size());
    if (!b.ok()) return b;
    GC_RETURN_IF_ERROR(b->raw_.upload(host.data(), host.size_bytes()));
    return b;
  }

  T* data() const { return static_cast<T*>(raw_.data()); }
  size_t size() const { return size_; }
  std::span<T> span() const { return {data(), size_}; }

  Status upload(std::span<const T> host) { return raw_.upload(host.data(), host.size_bytes()); }
  Result<std::vector<T>> download() const { return download(size_); }
  Result<std::vector<T>> download(size_t n) const {
    std::vector<T> host(n);
    GC_RETURN_IF_ERROR(raw_.download(host.data(), n * sizeof(T)));
    return host;
  }

 private:
  RawDeviceBuffer raw_;
  size_t size_ = 0;
};

}  // namespace gcagent::compress::cuda

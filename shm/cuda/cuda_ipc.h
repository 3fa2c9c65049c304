// Device memory one process (the agent) owns and another (a trainer) maps: a cuMem (VMM)
// allocation exported as a POSIX file descriptor, which travels over the Unix control socket
// with SCM_RIGHTS. The importer checks that both processes see the same GPU (by UUID), so a
// trainer on another GPU, or in a namespace where the fd means nothing, gets a clear error
// rather than someone else's memory.
#pragma once

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/status.h"
#include "shm/cuda/cuda_driver.h"
#include "shm/fd_passing.h"

namespace gcagent::shm::cuda {

using GpuUuid = std::array<uint8_t, 16>;

std::string uuidText(const GpuUuid& uuid);  // "GPU-1a2b...-..."

// The GPU of a device ordinal, with its primary context made current on this thread.
Result<GpuUuid> useDevice(const CudaDriver& driver, int ordinal);

// How device memory is shared. kPosixFd (cuMem/VMM, the fd crosses the socket) is the
// default; kLegacyIpc (cuMemAlloc + cuIpcGetMemHandle, a 64-byte handle crosses instead) is
// the fallback when the device does not support POSIX fd handles.
enum class ExportKind : uint8_t { kPosixFd = 1, kLegacyIpc = 2 };

// kPosixFd when the device reports CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
// else kLegacyIpc.
Result<ExportKind> preferredExportKind(const CudaDriver& driver, int ordinal);

// What the exporter sends beside the fd: enough for the importer to check and map it.
struct ExportDescriptor {
  GpuUuid gpu{};
  uint64_t bytes = 0;  // the mapped size, a multiple of the allocation granularity
  ExportKind kind = ExportKind::kPosixFd;
  CUipcMemHandle legacy{};  // kLegacyIpc only
};

// A mapped device allocation; owns the mapping, the physical memory and, for the exporter,
// the exported fd.
class SharedDeviceMemory {
 public:
  SharedDeviceMemory() = default;
  SharedDeviceMemory(SharedDeviceMemory&& other) noexcept { *this = std::move(other); }
  SharedDeviceMemory& operator=(SharedDeviceMemory&& other) noexcept;
  ~SharedDeviceMemory();

  // At least `bytes` of device memory on `ordinal`, exportable the way `kind` says (none:
  // preferredExportKind).
  static Result<SharedDeviceMemory> create(const CudaDriver& driver, int ordinal, size_t bytes,
                                           std::optional<ExportKind> kind = std::nullopt);

  // Maps memory the exporter described: through `fd` for kPosixFd (the caller keeps
  // ownership of the fd), through descriptor.legacy for kLegacyIpc (fd unused, may be -1).
  // `ordinal` is the device this process uses; it must be the exporter's GPU.
  static Result<SharedDeviceMemory> import(const CudaDriver& driver, int ordinal, int fd,
                                           const ExportDescriptor& descriptor);

  CUdeviceptr address() const { return address_; }
  size_t bytes() const { return bytes_; }
  int fd() const { return fd_; }  // the exporter's shareable handle; -1 for an importer
  ExportDescriptor descriptor() const { return {gpu_, bytes_, kind_, legacy_}; }

 private:
  Status map(CUmemGenericAllocationHandle handle, int ordinal);
  Status createLegacy(int ordinal);

  const CudaDriver* driver_ = nullptr;
  CUdeviceptr address_ = 0;
  size_t bytes_ = 0;
  CUmemGenericAllocationHandle handle_ = 0;
  bool mapped_ = false;
  int fd_ = -1;
  GpuUuid gpu_{};
  ExportKind kind_ = ExportKind::kPosixFd;
  CUipcMemHandle legacy_{};
  bool legacy_owner_ = false;     // cuMemAlloc'ed here: cuMemFree
  bool legacy_imported_ = false;  // opened from a handle: cuIpcCloseMemHandle
};

// An event both processes can record and wait on, so GPU work is ordered across them
// without either waiting on the host: the writer records after its writes, the reader's
// stream waits on it (cuStreamWaitEvent) before its reads.
class SharedEvent {
 public:
  SharedEvent() = default;
  SharedEvent(SharedEvent&& other) noexcept { *this = std::move(other); }
  SharedEvent& operator=(SharedEvent&& other) noexcept {
    std::swap(driver_, other.driver_);
    std::swap(event_, other.event_);
    return *this;
  }
  ~SharedEvent();

  static Result<SharedEvent> create(const CudaDriver& driver);
  // Opens the handle another process got from handle() (same GPU, same IPC namespace).
  static Result<SharedEvent> open(const CudaDriver& driver, const CUipcEventHandle& handle);

  Result<CUipcEventHandle> handle() const;
  Status record(CUstream stream) const;
  Status waitOn(CUstream stream) const;  // `stream`'s later work waits for the last record

 private:
  const CudaDriver* driver_ = nullptr;
  CUevent event_ = nullptr;
};

// sendFd and receiveFd (shm/fd_passing.h) carry the exported fd.

}  // namespace gcagent::shm::cuda

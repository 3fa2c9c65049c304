#include "shm/cuda/cuda_ipc.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "common/gpu_uuid.h"
#include "common/str_cat.h"

namespace gcagent::shm::cuda {
namespace {

CUmemAllocationProp exportableOn(int ordinal) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

}  // namespace

std::string uuidText(const GpuUuid& uuid) { return gpuUuidText(uuid); }

Result<GpuUuid> useDevice(const CudaDriver& d, int ordinal) {
  int count = 0;
  if (CUresult r = d.deviceGetCount(&count); r != CUDA_SUCCESS)
    return Status::unavailable(strCat("no GPU: ", d.describe("cuDeviceGetCount", r)));
  if (ordinal < 0 || ordinal >= count)
    return Status::invalidArgument(strCat("gpu ", ordinal, " does not exist: this process sees ", count, " GPU(s)"));
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUuuid uuid{};
  CUresult r = d.deviceGet(&dev, ordinal);
  if (r == CUDA_SUCCESS) r = d.primaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = d.ctxSetCurrent(ctx);
  if (r == CUDA_SUCCESS) r = d.deviceGetUuid(&uuid, dev);
  if (r != CUDA_SUCCESS) return Status::unavailable(strCat("gpu ", ordinal, ": ", d.describe("device setup", r)));
  GpuUuid out;
  std::memcpy(out.data(), uuid.bytes, out.size());
  return out;
}

SharedDeviceMemory& SharedDeviceMemory::operator=(SharedDeviceMemory&& other) noexcept {
  std::swap(driver_, other.driver_);
  std::swap(address_, other.address_);
  std::swap(bytes_, other.bytes_);
  std::swap(handle_, other.handle_);
  std::swap(mapped_, other.mapped_);
  std::swap(fd_, other.fd_);
  std::swap(gpu_, other.gpu_);
  std::swap(kind_, other.kind_);
  std::swap(legacy_, other.legacy_);
  std::swap(legacy_owner_, other.legacy_owner_);
  std::swap(legacy_imported_, other.legacy_imported_);
  return *this;
}

SharedDeviceMemory::~SharedDeviceMemory() {
  if (driver_ == nullptr) return;
  if (legacy_imported_) driver_->ipcCloseMemHandle(address_);
  if (legacy_owner_) driver_->memFree(address_);
  if (legacy_imported_ || legacy_owner_) return;
  if (mapped_) driver_->memUnmap(address_, bytes_);
  if (address_ != 0) driver_->memAddressFree(address_, bytes_);
  if (handle_ != 0) driver_->memRelease(handle_);
  if (fd_ >= 0) close(fd_);
}

Status SharedDeviceMemory::map(CUmemGenericAllocationHandle handle, int ordinal) {
  const CudaDriver& d = *driver_;
  handle_ = handle;
  if (CUresult r = d.memAddressReserve(&address_, bytes_, 0, 0, 0); r != CUDA_SUCCESS) {
    address_ = 0;
    return Status::resourceExhausted(d.describe("cuMemAddressReserve", r));
  }
  if (CUresult r = d.memMap(address_, bytes_, 0, handle_, 0); r != CUDA_SUCCESS)
    return Status::unavailable(d.describe("cuMemMap", r));
  mapped_ = true;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = ordinal;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = d.memSetAccess(address_, bytes_, &access, 1); r != CUDA_SUCCESS)
    return Status::unavailable(d.describe("cuMemSetAccess", r));
  return {};
}

Result<ExportKind> preferredExportKind(const CudaDriver& d, int ordinal) {
  CUdevice dev = 0;
  int supported = 0;
  CUresult r = d.deviceGet(&dev, ordinal);
  if (r == CUDA_SUCCESS)
    r = d.deviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev);
  if (r != CUDA_SUCCESS) return Status::unavailable(strCat("gpu ", ordinal, ": ", d.describe("cuDeviceGetAttribute", r)));
  return supported != 0 ? ExportKind::kPosixFd : ExportKind::kLegacyIpc;
}

Status SharedDeviceMemory::createLegacy(int ordinal) {
  const CudaDriver& d = *driver_;
  constexpr size_t kAlign = 2u << 20;  // what cuIpcOpenMemHandle maps anyway
  bytes_ = (std::max<size_t>(bytes_, 1) + kAlign - 1) / kAlign * kAlign;
  if (CUresult r = d.memAlloc(&address_, bytes_); r != CUDA_SUCCESS) {
    address_ = 0;
    return Status::resourceExhausted(strCat("gpu ", ordinal, ": ", bytes_, " bytes: ", d.describe("cuMemAlloc", r)));
  }
  legacy_owner_ = true;
  if (CUresult r = d.ipcGetMemHandle(&legacy_, address_); r != CUDA_SUCCESS)
    return Status::unavailable(strCat("gpu ", ordinal, " can export memory neither as a file descriptor nor as a "
                                      "legacy ipc handle: ", d.describe("cuIpcGetMemHandle", r)));
  return {};
}

Result<SharedDeviceMemory> SharedDeviceMemory::create(const CudaDriver& d, int ordinal, size_t bytes,
                                                      std::optional<ExportKind> kind) {
  SharedDeviceMemory m;
  m.driver_ = &d;
  GC_ASSIGN_OR_RETURN(m.gpu_, useDevice(d, ordinal));
  if (!kind) {
    GC_ASSIGN_OR_RETURN(kind, preferredExportKind(d, ordinal));
  }
  m.kind_ = *kind;
  if (m.kind_ == ExportKind::kLegacyIpc) {
    m.bytes_ = bytes;
    GC_RETURN_IF_ERROR(m.createLegacy(ordinal));
    return Result<SharedDeviceMemory>(std::move(m));
  }
  const CUmemAllocationProp prop = exportableOn(ordinal);
  size_t granularity = 0;
  if (CUresult r = d.memGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      r != CUDA_SUCCESS)
    return Status::unavailable(strCat("gpu ", ordinal, " cannot export memory as a file descriptor: ",
                                      d.describe("cuMemGetAllocationGranularity", r)));
  m.bytes_ = (std::max<size_t>(bytes, 1) + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = d.memCreate(&handle, m.bytes_, &prop, 0); r != CUDA_SUCCESS)
    return Status::resourceExhausted(strCat("gpu ", ordinal, ": ", m.bytes_, " bytes: ", d.describe("cuMemCreate", r)));
  GC_RETURN_IF_ERROR(m.map(handle, ordinal));
  int fd = -1;
  if (CUresult r = d.memExportToShareableHandle(&fd, m.handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      r != CUDA_SUCCESS)
    return Status::unavailable(d.describe("cuMemExportToShareableHandle", r));
  m.fd_ = fd;
  return Result<SharedDeviceMemory>(std::move(m));
}

Result<SharedDeviceMemory> SharedDeviceMemory::import(const CudaDriver& d, int ordinal, int fd,
                                                      const ExportDescriptor& descriptor) {
  SharedDeviceMemory m;
  m.driver_ = &d;
  GC_ASSIGN_OR_RETURN(m.gpu_, useDevice(d, ordinal));
  if (m.gpu_ != descriptor.gpu)
    return Status::failedPrecondition(
        strCat("trainer and agent see different GPUs: the buffer lives on ", uuidText(descriptor.gpu),
               ", this process uses gpu ", ordinal, " (", uuidText(m.gpu_),
               "); give both the same device (CUDA_VISIBLE_DEVICES)"));
  m.bytes_ = descriptor.bytes;
  m.kind_ = descriptor.kind;
  if (descriptor.kind == ExportKind::kLegacyIpc) {
    m.legacy_ = descriptor.legacy;
    if (CUresult r = d.ipcOpenMemHandle(&m.address_, descriptor.legacy, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        r != CUDA_SUCCESS) {
      m.address_ = 0;
      return Status::failedPrecondition(strCat(
          "cannot open the agent's GPU memory handle (do the trainer and the agent share an IPC namespace "
          "and a driver?): ", d.describe("cuIpcOpenMemHandle", r)));
    }
    m.legacy_imported_ = true;
    return Result<SharedDeviceMemory>(std::move(m));
  }
  CUmemGenericAllocationHandle handle = 0;
  // The driver takes the fd by value, passed in the pointer argument.
  if (CUresult r = d.memImportFromShareableHandle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      r != CUDA_SUCCESS)
    return Status::failedPrecondition(strCat(
        "cannot import the agent's GPU memory (do the trainer and the agent share an IPC namespace "
        "and a driver?): ", d.describe("cuMemImportFromShareableHandle", r)));
  GC_RETURN_IF_ERROR(m.map(handle, ordinal));
  return Result<SharedDeviceMemory>(std::move(m));
}

SharedEvent::~SharedEvent() {
  if (driver_ != nullptr && event_ != nullptr) driver_->eventDestroy(event_);
}

Result<SharedEvent> SharedEvent::create(const CudaDriver& d) {
  SharedEvent e;
  e.driver_ = &d;
  if (CUresult r = d.eventCreate(&e.event_, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) {
    e.event_ = nullptr;
    return Status::unavailable(d.describe("cuEventCreate", r));
  }
  return Result<SharedEvent>(std::move(e));
}

Result<SharedEvent> SharedEvent::open(const CudaDriver& d, const CUipcEventHandle& handle) {
  SharedEvent e;
  e.driver_ = &d;
  if (CUresult r = d.ipcOpenEventHandle(&e.event_, handle); r != CUDA_SUCCESS) {
    e.event_ = nullptr;
    return Status::failedPrecondition(strCat(
        "cannot open the agent's GPU event (do the trainer and the agent share a GPU and an IPC "
        "namespace?): ", d.describe("cuIpcOpenEventHandle", r)));
  }
  return Result<SharedEvent>(std::move(e));
}

Result<CUipcEventHandle> SharedEvent::handle() const {
  CUipcEventHandle h{};
  if (CUresult r = driver_->ipcGetEventHandle(&h, event_); r != CUDA_SUCCESS)
    return Status::unavailable(driver_->describe("cuIpcGetEventHandle", r));
  return h;
}

Status SharedEvent::record(CUstream stream) const {
  if (CUresult r = driver_->eventRecord(event_, stream); r != CUDA_SUCCESS)
    return Status::unavailable(driver_->describe("cuEventRecord", r));
  return {};
}

Status SharedEvent::waitOn(CUstream stream) const {
  if (CUresult r = driver_->streamWaitEvent(stream, event_, 0); r != CUDA_SUCCESS)
    return Status::unavailable(driver_->describe("cuStreamWaitEvent", r));
  return {};
}

}  // namespace gcagent::shm::cuda

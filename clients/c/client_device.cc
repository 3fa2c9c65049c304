#include "client_device.h"

#include <cstring>

#include "common/build_config.h"
#include "common/str_cat.h"
#if GCAGENT_HAVE_CUDA
#include "shm/cuda/cuda_ipc.h"
#endif

namespace gcagent::client {

#if GCAGENT_HAVE_CUDA

namespace cuda = shm::cuda;

class DeviceMapping {
 public:
  const cuda::CudaDriver* driver = nullptr;
  // The device's primary context (what the CUDA runtime uses), made current before each call:
  // a shim may record and wait from a thread that never touched CUDA.
  CUcontext context = nullptr;
  cuda::SharedDeviceMemory memory;
  cuda::SharedEvent ready;
  cuda::SharedEvent done;
};

namespace {

Outcome cudaFailure(const Status& s) {
  const gcagent_status code = s.code() == StatusCode::kResourceExhausted ? GCAGENT_ERR_NO_MEMORY
                              : s.code() == StatusCode::kFailedPrecondition ? GCAGENT_ERR_STATE
                                                                            : GCAGENT_ERR_UNSUPPORTED;
  return failure(code, s.message());
}

Result<const cuda::CudaDriver*> driver() { return cuda::CudaDriver::load(); }

}  // namespace

Outcome gpuUuid(int ordinal, shm::protocol::GpuUuidBytes* out) {
  auto d = driver();
  if (!d.ok()) return failure(GCAGENT_ERR_UNSUPPORTED, d.status().message());
  auto uuid = cuda::useDevice(**d, ordinal);
  if (!uuid.ok()) return cudaFailure(uuid.status());
  std::memcpy(out->data(), uuid->data(), out->size());
  return success();
}

Outcome mapDevice(const shm::protocol::DeclaredDevice& offer, int fd, std::shared_ptr<DeviceMapping>* out) {
  auto d = driver();
  if (!d.ok())
    return failure(GCAGENT_ERR_UNSUPPORTED,
                   strCat("the agent offered GPU memory, but this process cannot use CUDA: ", d.status().message()));
  const cuda::CudaDriver& drv = **d;
  cuda::ExportDescriptor desc;
  std::memcpy(desc.gpu.data(), offer.gpu.data(), desc.gpu.size());
  desc.bytes = offer.allocation_bytes;
  desc.kind = offer.kind == shm::protocol::DeviceHandleKind::kPosixFd ? cuda::ExportKind::kPosixFd
                                                                      : cuda::ExportKind::kLegacyIpc;
  std::memcpy(desc.legacy.reserved, offer.mem_handle.data(), sizeof desc.legacy.reserved);
  // The offer names the GPU by UUID; find which local ordinal that is.
  int count = 0;
  if (CUresult r = drv.deviceGetCount(&count); r != CUDA_SUCCESS)
    return failure(GCAGENT_ERR_UNSUPPORTED, drv.describe("cuDeviceGetCount", r));
  int ordinal = -1;
  for (int i = 0; i < count && ordinal < 0; ++i) {
    CUdevice dev = 0;
    CUuuid uuid{};
    if (drv.deviceGet(&dev, i) == CUDA_SUCCESS && drv.deviceGetUuid(&uuid, dev) == CUDA_SUCCESS &&
        std::memcmp(uuid.bytes, desc.gpu.data(), desc.gpu.size()) == 0)
      ordinal = i;
  }
  if (ordinal < 0)
    return failure(GCAGENT_ERR_STATE, strCat("the agent's GPU ", cuda::uuidText(desc.gpu), " is not among the ", count,
                                             " GPU(s) this process sees (CUDA_VISIBLE_DEVICES?)"));
  auto mapping = std::make_shared<DeviceMapping>();
  mapping->driver = &drv;
  CUdevice dev = 0;
  CUresult r = drv.deviceGet(&dev, ordinal);
  if (r == CUDA_SUCCESS) r = drv.primaryCtxRetain(&mapping->context, dev);
  if (r != CUDA_SUCCESS) return failure(GCAGENT_ERR_UNSUPPORTED, drv.describe("primary context", r));
  auto memory = cuda::SharedDeviceMemory::import(drv, ordinal, fd, desc);
  if (!memory.ok()) return cudaFailure(memory.status());
  mapping->memory = std::move(memory).value();
  CUipcEventHandle ready{}, done{};
  std::memcpy(ready.reserved, offer.ready_event.data(), sizeof ready.reserved);
  std::memcpy(done.reserved, offer.done_event.data(), sizeof done.reserved);
  auto ready_event = cuda::SharedEvent::open(drv, ready);
  if (!ready_event.ok()) return cudaFailure(ready_event.status());
  auto done_event = cuda::SharedEvent::open(drv, done);
  if (!done_event.ok()) return cudaFailure(done_event.status());
  mapping->ready = std::move(ready_event).value();
  mapping->done = std::move(done_event).value();
  *out = std::move(mapping);
  return success();
}

uint64_t deviceBase(const DeviceMapping& mapping) { return mapping.memory.address(); }

Outcome recordReady(const DeviceMapping& mapping, void* stream) {
  if (CUresult r = mapping.driver->ctxSetCurrent(mapping.context); r != CUDA_SUCCESS)
    return failure(GCAGENT_ERR_UNSUPPORTED, mapping.driver->describe("cuCtxSetCurrent", r));
  Status s = mapping.ready.record(static_cast<CUstream>(stream));
  return s.ok() ? success() : failure(GCAGENT_ERR_UNSUPPORTED, s.message());
}

Outcome waitDone(const DeviceMapping& mapping, void* stream) {
  if (CUresult r = mapping.driver->ctxSetCurrent(mapping.context); r != CUDA_SUCCESS)
    return failure(GCAGENT_ERR_UNSUPPORTED, mapping.driver->describe("cuCtxSetCurrent", r));
  Status s = mapping.done.waitOn(static_cast<CUstream>(stream));
  return s.ok() ? success() : failure(GCAGENT_ERR_UNSUPPORTED, s.message());
}

#else  // !GCAGENT_HAVE_CUDA

class DeviceMapping {};

namespace {
constexpr const char* kNoCuda = "this gcagent client library was built without CUDA";
}

Outcome gpuUuid(int, shm::protocol::GpuUuidBytes*) { return failure(GCAGENT_ERR_UNSUPPORTED, kNoCuda); }

Outcome mapDevice(const shm::protocol::DeclaredDevice&, int, std::shared_ptr<DeviceMapping>*) {
  return failure(GCAGENT_ERR_UNSUPPORTED, strCat("the agent offered GPU memory, but ", kNoCuda));
}

uint64_t deviceBase(const DeviceMapping&) { return 0; }
Outcome recordReady(const DeviceMapping&, void*) { return failure(GCAGENT_ERR_UNSUPPORTED, kNoCuda); }
Outcome waitDone(const DeviceMapping&, void*) { return failure(GCAGENT_ERR_UNSUPPORTED, kNoCuda); }

#endif

}  // namespace gcagent::client

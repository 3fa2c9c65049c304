// DevicePath on the agent's GPU, through the driver API loaded at run time.
#include <cstring>

#include "agent/device_path.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "shm/cuda/cuda_ipc.h"

namespace gcagent::agent {
namespace {

namespace cuda = shm::cuda;
namespace protocol = shm::protocol;

constexpr uint64_t kSlotAlign = 256;  // what cudaMalloc guarantees; kernels expect it

class CudaSlots : public DeviceSlots {
 public:
  CudaSlots(const cuda::CudaDriver& d, CUcontext context, CUstream stream) : d_(d), context_(context), stream_(stream) {}
  // Copies into or out of this memory may still be queued: they finish before it goes.
  ~CudaSlots() override {
    d_.ctxSetCurrent(context_);
    d_.streamSynchronize(stream_);
  }
  const protocol::DeclaredDevice& offer() const override { return offer_; }
  int fd() const override { return memory.fd(); }

  cuda::SharedDeviceMemory memory;
  cuda::SharedEvent ready;  // the trainer records it after writing its gradients
  cuda::SharedEvent done;   // recorded here after writing the averages
  protocol::DeclaredDevice offer_;

 private:
  const cuda::CudaDriver& d_;
  CUcontext context_;
  CUstream stream_;
};

class CudaDevicePath : public DevicePath {
 public:
  CudaDevicePath(asio::io_context& io, const cuda::CudaDriver& driver, int ordinal, cuda::GpuUuid uuid,
                 CUcontext context, CUstream stream)
      : io_(io), d_(driver), ordinal_(ordinal), uuid_(uuid), context_(context), stream_(stream) {}
  ~CudaDevicePath() override {
    d_.ctxSetCurrent(context_);
    d_.streamSynchronize(stream_);
    d_.streamDestroy(stream_);
  }

  Result<std::unique_ptr<DeviceSlots>> allocate(const protocol::GpuUuidBytes& trainer_gpu,
                                                std::span<const uint64_t> slot_bytes) override {
    if (std::memcmp(trainer_gpu.data(), uuid_.data(), uuid_.size()) != 0)
      return Status::failedPrecondition(strCat("the trainer's tensors live on ", gpuUuidText(trainer_gpu),
                                               ", but this agent uses gpu ", ordinal_, " (", cuda::uuidText(uuid_),
                                               "); give the agent and the trainer the same GPU"));
    d_.ctxSetCurrent(context_);
    auto slots = std::make_unique<CudaSlots>(d_, context_, stream_);
    uint64_t total = 0;
    for (uint64_t bytes : slot_bytes) {
      slots->offer_.slot_offsets.push_back(total);
      total += (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    }
    if (total > protocol::kMaxDeviceBytes)
      return Status::resourceExhausted(strCat("the declared tensors need ", total, " bytes of GPU memory, more than ",
                                              protocol::kMaxDeviceBytes));
    GC_ASSIGN_OR_RETURN(slots->memory, cuda::SharedDeviceMemory::create(d_, ordinal_, total));
    GC_ASSIGN_OR_RETURN(slots->ready, cuda::SharedEvent::create(d_));
    GC_ASSIGN_OR_RETURN(slots->done, cuda::SharedEvent::create(d_));
    GC_ASSIGN_OR_RETURN(CUipcEventHandle ready, slots->ready.handle());
    GC_ASSIGN_OR_RETURN(CUipcEventHandle done, slots->done.handle());
    const cuda::ExportDescriptor desc = slots->memory.descriptor();
    protocol::DeclaredDevice& o = slots->offer_;
    o.kind = desc.kind == cuda::ExportKind::kPosixFd ? protocol::DeviceHandleKind::kPosixFd
                                                     : protocol::DeviceHandleKind::kLegacyIpc;
    std::memcpy(o.gpu.data(), uuid_.data(), o.gpu.size());
    o.allocation_bytes = desc.bytes;
    if (desc.kind == cuda::ExportKind::kLegacyIpc) std::memcpy(o.mem_handle.data(), desc.legacy.reserved, 64);
    std::memcpy(o.ready_event.data(), ready.reserved, 64);
    std::memcpy(o.done_event.data(), done.reserved, 64);
    return std::unique_ptr<DeviceSlots>(std::move(slots));
  }

  void stageIn(DeviceSlots& s, size_t index, float* host, uint64_t elements, Done done) override {
    auto& slots = static_cast<CudaSlots&>(s);
    d_.ctxSetCurrent(context_);
    Status st = slots.ready.waitOn(stream_);
    if (st.ok())
      if (CUresult r = d_.memcpyDtoHAsync(host, address(slots, index), elements * sizeof(float), stream_);
          r != CUDA_SUCCESS)
        st = Status::unavailable(d_.describe("cuMemcpyDtoHAsync", r));
    finish(std::move(st), std::move(done));
  }

  void stageOut(DeviceSlots& s, size_t index, const float* host, uint64_t elements, Done done) override {
    auto& slots = static_cast<CudaSlots&>(s);
    d_.ctxSetCurrent(context_);
    Status st;
    if (CUresult r = d_.memcpyHtoDAsync(address(slots, index), host, elements * sizeof(float), stream_);
        r != CUDA_SUCCESS)
      st = Status::unavailable(d_.describe("cuMemcpyHtoDAsync", r));
    if (st.ok()) st = slots.done.record(stream_);
    finish(std::move(st), std::move(done));
  }

 private:
  struct Pending {
    asio::io_context* io;
    Done done;
  };

  static CUdeviceptr address(const CudaSlots& slots, size_t index) {
    return slots.memory.address() + slots.offer_.slot_offsets.at(index);
  }

  // Runs `done` on the io thread once the stream has passed this point (or at once on error).
  void finish(Status st, Done done) {
    if (st.ok()) {
      auto* pending = new Pending{&io_, std::move(done)};
      CUresult r = d_.launchHostFunc(
          stream_,
          [](void* p) {
            std::unique_ptr<Pending> owned(static_cast<Pending*>(p));
            asio::post(*owned->io, [done = std::move(owned->done)] { done({}); });
          },
          pending);
      if (r == CUDA_SUCCESS) return;
      done = std::move(pending->done);
      delete pending;
      st = Status::unavailable(d_.describe("cuLaunchHostFunc", r));
    }
    asio::post(io_, [done = std::move(done), st = std::move(st)] { done(st); });
  }

  asio::io_context& io_;
  const cuda::CudaDriver& d_;
  int ordinal_;
  cuda::GpuUuid uuid_;
  CUcontext context_;
  CUstream stream_;
};

}  // namespace

std::unique_ptr<DevicePath> makeCudaDevicePath(asio::io_context& io, int ordinal) {
  auto driver = cuda::CudaDriver::load();
  if (!driver.ok()) return makeUnavailableDevicePath(driver.status().message());
  const cuda::CudaDriver& d = **driver;
  auto uuid = cuda::useDevice(d, ordinal);
  if (!uuid.ok()) return makeUnavailableDevicePath(uuid.status().message());
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  CUdevice dev = 0;
  CUresult r = d.deviceGet(&dev, ordinal);
  if (r == CUDA_SUCCESS) r = d.primaryCtxRetain(&context, dev);
  if (r == CUDA_SUCCESS) r = d.streamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) return makeUnavailableDevicePath(strCat("gpu ", ordinal, ": ", d.describe("stream setup", r)));
  GC_LOG(kInfo, "device", "trainers' device tensors go through gpu ", ordinal, " (", cuda::uuidText(*uuid), ")");
  return std::make_unique<CudaDevicePath>(io, d, ordinal, *uuid, context, stream);
}

}  // namespace gcagent::agent

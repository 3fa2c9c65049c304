// DevicePath on the agent's GPU, through the driver API loaded at run time.
#include <algorithm>
#include <cstring>
#include <vector>

#include "agent/coding/device_path.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "shm/cuda/cuda_ipc.h"

namespace gcagent::agent {
namespace {

namespace cuda = shm::cuda;
namespace protocol = shm::protocol;

constexpr uint64_t kSlotAlign = 256;  // what cudaMalloc guarantees; kernels expect it

// One GPU the agent sees, with the stream its copies for that GPU's trainers run on.
struct Device {
  int ordinal = 0;
  cuda::GpuUuid uuid{};
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::shared_ptr<LocalCoder> coder;  // works on `stream`, so it is ordered with the copies
};

class CudaSlots : public DeviceSlots {
 public:
  CudaSlots(const cuda::CudaDriver& d, const Device& device) : device(device), d_(d) {}
  // Copies into or out of this memory may still be queued: they finish before it goes.
  ~CudaSlots() override {
    d_.ctxSetCurrent(device.context);
    d_.streamSynchronize(device.stream);
    for (float* h : host) d_.memFreeHost(h);
  }
  const protocol::DeclaredDevice& offer() const override { return offer_; }
  int fd() const override { return memory.fd(); }
  float* hostBuffer(size_t index) override { return host.at(index); }
  float* deviceBuffer(size_t index) override {
    return reinterpret_cast<float*>(memory.address() + offer_.slot_offsets.at(index));
  }
  std::shared_ptr<LocalCoder> coder() override { return device.coder; }

  cuda::SharedDeviceMemory memory;
  cuda::SharedEvent ready;  // the trainer records it after writing its gradients
  cuda::SharedEvent done;   // recorded here after writing the averages
  std::vector<float*> host;  // pinned, one per slot
  protocol::DeclaredDevice offer_;
  const Device& device;

 private:
  const cuda::CudaDriver& d_;
};

class CudaDevicePath : public DevicePath {
 public:
  CudaDevicePath(asio::io_context& io, const cuda::CudaDriver& driver, std::vector<Device> devices)
      : io_(io), d_(driver), devices_(std::move(devices)) {}
  ~CudaDevicePath() override {
    for (Device& dev : devices_) {
      // The engine may hold the coder longer (its keys keep it for their residuals), and the
      // coder works on this stream: the stream then stays, for the process's lifetime.
      const bool coder_outlives = dev.coder && dev.coder.use_count() > 1;
      dev.coder.reset();
      d_.ctxSetCurrent(dev.context);
      d_.streamSynchronize(dev.stream);
      if (!coder_outlives) d_.streamDestroy(dev.stream);
    }
  }

  Result<std::unique_ptr<DeviceSlots>> allocate(const protocol::GpuUuidBytes& trainer_gpu,
                                                std::span<const uint64_t> slot_bytes) override {
    const Device* found = nullptr;
    for (const Device& dev : devices_)
      if (std::memcmp(trainer_gpu.data(), dev.uuid.data(), dev.uuid.size()) == 0) found = &dev;
    if (found == nullptr) {
      std::string seen;
      for (const Device& dev : devices_)
        seen += strCat(seen.empty() ? "" : ", ", "gpu ", dev.ordinal, " (", cuda::uuidText(dev.uuid), ")");
      return Status::failedPrecondition(strCat("the trainer's tensors live on ", gpuUuidText(trainer_gpu),
                                               ", which this agent does not see (it sees ", seen,
                                               "); give the agent the trainer's GPU (CUDA_VISIBLE_DEVICES)"));
    }
    const Device& dev = *found;
    d_.ctxSetCurrent(dev.context);
    auto slots = std::make_unique<CudaSlots>(d_, dev);
    uint64_t total = 0;
    for (uint64_t bytes : slot_bytes) {
      slots->offer_.slot_offsets.push_back(total);
      total += (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    }
    if (total > protocol::kMaxDeviceBytes)
      return Status::resourceExhausted(strCat("the declared tensors need ", total, " bytes of GPU memory, more than ",
                                              protocol::kMaxDeviceBytes));
    GC_ASSIGN_OR_RETURN(slots->memory, cuda::SharedDeviceMemory::create(d_, dev.ordinal, total));
    for (uint64_t bytes : slot_bytes) {
      void* h = nullptr;
      if (CUresult r = d_.memHostAlloc(&h, std::max<uint64_t>(bytes, 1), 0); r != CUDA_SUCCESS)
        return Status::resourceExhausted(strCat(bytes, " bytes of pinned host memory: ", d_.describe("cuMemHostAlloc", r)));
      slots->host.push_back(static_cast<float*>(h));
    }
    GC_ASSIGN_OR_RETURN(slots->ready, cuda::SharedEvent::create(d_));
    GC_ASSIGN_OR_RETURN(slots->done, cuda::SharedEvent::create(d_));
    GC_ASSIGN_OR_RETURN(CUipcEventHandle ready, slots->ready.handle());
    GC_ASSIGN_OR_RETURN(CUipcEventHandle done, slots->done.handle());
    const cuda::ExportDescriptor desc = slots->memory.descriptor();
    protocol::DeclaredDevice& o = slots->offer_;
    o.kind = desc.kind == cuda::ExportKind::kPosixFd ? protocol::DeviceHandleKind::kPosixFd
                                                     : protocol::DeviceHandleKind::kLegacyIpc;
    std::memcpy(o.gpu.data(), dev.uuid.data(), o.gpu.size());
    o.allocation_bytes = desc.bytes;
    if (desc.kind == cuda::ExportKind::kLegacyIpc) std::memcpy(o.mem_handle.data(), desc.legacy.reserved, 64);
    std::memcpy(o.ready_event.data(), ready.reserved, 64);
    std::memcpy(o.done_event.data(), done.reserved, 64);
    return std::unique_ptr<DeviceSlots>(std::move(slots));
  }

  void stageIn(DeviceSlots& s, size_t index, uint64_t elements, Done done) override {
    auto& slots = static_cast<CudaSlots&>(s);
    const Device& dev = slots.device;
    d_.ctxSetCurrent(dev.context);
    Status st = slots.ready.waitOn(dev.stream);
    if (st.ok())
      if (CUresult r = d_.memcpyDtoHAsync(slots.host.at(index), address(slots, index), elements * sizeof(float),
                                          dev.stream);
          r != CUDA_SUCCESS)
        st = Status::unavailable(d_.describe("cuMemcpyDtoHAsync", r));
    finish(dev, std::move(st), std::move(done));
  }

  Status awaitReady(DeviceSlots& s) override {
    auto& slots = static_cast<CudaSlots&>(s);
    d_.ctxSetCurrent(slots.device.context);
    return slots.ready.waitOn(slots.device.stream);
  }

  void signalDone(DeviceSlots& s, Done done) override {
    auto& slots = static_cast<CudaSlots&>(s);
    const Device& dev = slots.device;
    d_.ctxSetCurrent(dev.context);
    finish(dev, slots.done.record(dev.stream), std::move(done));
  }

  void stageOut(DeviceSlots& s, size_t index, uint64_t elements, Done done) override {
    auto& slots = static_cast<CudaSlots&>(s);
    const Device& dev = slots.device;
    d_.ctxSetCurrent(dev.context);
    Status st;
    if (CUresult r = d_.memcpyHtoDAsync(address(slots, index), slots.host.at(index), elements * sizeof(float),
                                        dev.stream);
        r != CUDA_SUCCESS)
      st = Status::unavailable(d_.describe("cuMemcpyHtoDAsync", r));
    if (st.ok()) st = slots.done.record(dev.stream);
    finish(dev, std::move(st), std::move(done));
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
  void finish(const Device& dev, Status st, Done done) {
    if (st.ok()) {
      auto* pending = new Pending{&io_, std::move(done)};
      CUresult r = d_.launchHostFunc(
          dev.stream,
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
  std::vector<Device> devices_;  // fixed in size: slots point into it
};

}  // namespace

std::unique_ptr<DevicePath> makeCudaDevicePath(asio::io_context& io, CoderFactory coders) {
  auto driver = cuda::CudaDriver::load();
  if (!driver.ok()) return makeUnavailableDevicePath(driver.status().message());
  const cuda::CudaDriver& d = **driver;
  int count = 0;
  if (CUresult r = d.deviceGetCount(&count); r != CUDA_SUCCESS)
    return makeUnavailableDevicePath(d.describe("cuDeviceGetCount", r));
  if (count == 0) return makeUnavailableDevicePath("the driver sees no GPU");
  std::vector<Device> devices;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    Device dev;
    dev.ordinal = ordinal;
    auto uuid = cuda::useDevice(d, ordinal);  // also makes its primary context current
    if (!uuid.ok()) return makeUnavailableDevicePath(uuid.status().message());
    dev.uuid = *uuid;
    CUdevice handle = 0;
    CUresult r = d.deviceGet(&handle, ordinal);
    if (r == CUDA_SUCCESS) r = d.primaryCtxRetain(&dev.context, handle);
    if (r == CUDA_SUCCESS) r = d.streamCreate(&dev.stream, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS)
      return makeUnavailableDevicePath(strCat("gpu ", ordinal, ": ", d.describe("stream setup", r)));
    const std::string description = strCat("gpu ", ordinal, " (", cuda::uuidText(dev.uuid), ")");
    if (coders) {
      // A GPU whose coder cannot be built still serves its trainers, through the host.
      auto coder = coders(ordinal, dev.stream, description);
      if (coder.ok()) {
        dev.coder = std::move(coder).value();
      } else {
        GC_LOG(kWarn, "device", description, ": gradients are staged through host memory: ",
               coder.status().message());
      }
    }
    GC_LOG(kInfo, "device", "device tensors of trainers on ", description, " are served, ",
           dev.coder ? "reduced and coded on the GPU" : "staged through host memory");
    devices.push_back(dev);
  }
  return std::make_unique<CudaDevicePath>(io, d, std::move(devices));
}

}  // namespace gcagent::agent

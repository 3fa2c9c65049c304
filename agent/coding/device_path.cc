#include "agent/coding/device_path.h"

#include <cstdio>

#include "common/build_config.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::agent {

#if GCAGENT_HAVE_CUDA
// device_path_cuda.cc
std::unique_ptr<DevicePath> makeCudaDevicePath(asio::io_context& io, CoderFactory coders);
#endif

namespace {

class UnavailableDevicePath : public DevicePath {
 public:
  // `why` may come from CudaDriver::load(), which says "no GPU: ..." itself.
  explicit UnavailableDevicePath(std::string why) : why_(std::move(why)) {
    if (why_.starts_with("no GPU: ")) why_.erase(0, 8);
  }

  Result<std::unique_ptr<DeviceSlots>> allocate(const shm::protocol::GpuUuidBytes& trainer_gpu,
                                                std::span<const uint64_t>) override {
    return Status::failedPrecondition(strCat("the trainer's tensors live on ", gpuUuidText(trainer_gpu),
                                             ", but this agent has no GPU (", why_,
                                             "); declare host tensors instead"));
  }
  void stageIn(DeviceSlots&, size_t, uint64_t, Done done) override {
    done(Status::internal("no device slots exist on an agent without a GPU"));
  }
  void stageOut(DeviceSlots&, size_t, uint64_t, Done done) override {
    done(Status::internal("no device slots exist on an agent without a GPU"));
  }
  Status awaitReady(DeviceSlots&) override {
    return Status::internal("no device slots exist on an agent without a GPU");
  }
  void signalDone(DeviceSlots&, Done done) override {
    done(Status::internal("no device slots exist on an agent without a GPU"));
  }

 private:
  std::string why_;
};

}  // namespace

std::unique_ptr<DevicePath> makeUnavailableDevicePath(std::string why) {
  return std::make_unique<UnavailableDevicePath>(std::move(why));
}

std::unique_ptr<DevicePath> makeDevicePath(asio::io_context& io, CoderFactory coders) {
#if GCAGENT_HAVE_CUDA
  return makeCudaDevicePath(io, std::move(coders));
#else
  (void)io;
  (void)coders;
  return makeUnavailableDevicePath("this agent was built without CUDA");
#endif
}

}  // namespace gcagent::agent

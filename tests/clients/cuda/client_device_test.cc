// The client library's device mapping (clients/c/client_device.cc) against an exporter that
// offers memory the way the agent does: a DeclaredDevice frame over a Unix socket, with the
// VMM descriptor on its first byte or a legacy IPC handle inside, and the two interprocess
// events. Two processes on a real GPU: the trainer writes its gradient on its own stream and
// records the ready event; the exporter's stream waits on it, checks the gradient and writes
// the "average" back, recording the done event; the trainer's stream waits on that before
// reading. Each side runs in a forked child that starts CUDA itself; without a GPU the test
// skips with the reason.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "client_device.h"
#include "device_trainer.h"
#include "shm/cuda/cuda_ipc.h"
#include "shm/protocol.h"
#include "tests/common/child_process.h"

namespace gcagent::client {
namespace {

namespace cuda = shm::cuda;
namespace protocol = shm::protocol;


using testing::inChild;

// The agent's side: the allocation, the events, the offer.
int exporter(int sock, cuda::ExportKind kind) {
  auto loaded = cuda::CudaDriver::load();
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().message().c_str());
    return kNoGpu;
  }
  const cuda::CudaDriver& d = **loaded;
  auto mem = cuda::SharedDeviceMemory::create(d, 0, kFloats * sizeof(float), kind);
  CHILD_CHECK(mem.ok(), "exporter: %s", mem.status().toString().c_str());
  auto ready = cuda::SharedEvent::create(d);
  auto done = cuda::SharedEvent::create(d);
  CHILD_CHECK(ready.ok() && done.ok(), "exporter: events");
  auto ready_handle = ready->handle();
  auto done_handle = done->handle();
  CHILD_CHECK(ready_handle.ok() && done_handle.ok(), "exporter: event handles");
  const cuda::ExportDescriptor desc = mem->descriptor();
  protocol::DeclaredDevice offer;
  offer.kind = kind == cuda::ExportKind::kPosixFd ? protocol::DeviceHandleKind::kPosixFd
                                                  : protocol::DeviceHandleKind::kLegacyIpc;
  std::memcpy(offer.gpu.data(), desc.gpu.data(), 16);
  offer.allocation_bytes = desc.bytes;
  if (kind == cuda::ExportKind::kLegacyIpc) std::memcpy(offer.mem_handle.data(), desc.legacy.reserved, 64);
  std::memcpy(offer.ready_event.data(), ready_handle->reserved, 64);
  std::memcpy(offer.done_event.data(), done_handle->reserved, 64);
  offer.slot_offsets = {0};
  const auto frame = protocol::encode({1, offer});
  if (kind == cuda::ExportKind::kPosixFd) {
    Status sent = shm::sendFd(sock, mem->fd(), frame);
    CHILD_CHECK(sent.ok(), "exporter: %s", sent.toString().c_str());
  } else {
    CHILD_CHECK(write(sock, frame.data(), frame.size()) == static_cast<ssize_t>(frame.size()), "exporter: send");
  }
  CHILD_CHECK(expectByte(sock, 's'), "exporter: no submit");
  CUstream stream = nullptr;
  CHILD_CHECK(d.streamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "exporter: stream");
  std::vector<float> host(kFloats);
  CHILD_CHECK(ready->waitOn(stream).ok(), "exporter: wait on ready");
  CHILD_CHECK(d.memcpyDtoHAsync(host.data(), mem->address(), kFloats * sizeof(float), stream) == CUDA_SUCCESS,
              "exporter: download");
  CHILD_CHECK(d.streamSynchronize(stream) == CUDA_SUCCESS, "exporter: sync");
  for (size_t i = 0; i < kFloats; ++i)
    CHILD_CHECK(host[i] == static_cast<float>(i), "exporter: gradient[%zu] is %f", i, host[i]);
  for (size_t i = 0; i < kFloats; ++i) host[i] = 0.5f * static_cast<float>(i);
  CHILD_CHECK(d.memcpyHtoDAsync(mem->address(), host.data(), kFloats * sizeof(float), stream) == CUDA_SUCCESS,
              "exporter: upload");
  CHILD_CHECK(done->record(stream).ok(), "exporter: record done");
  CHILD_CHECK(sendByte(sock, 'c'), "exporter: complete");
  CHILD_CHECK(expectByte(sock, 'v'), "exporter: the trainer did not verify");
  d.streamSynchronize(stream);
  d.streamDestroy(stream);
  return 0;
}

class ClientDeviceTest : public ::testing::TestWithParam<cuda::ExportKind> {};

TEST_P(ClientDeviceTest, TrainerMapsTheOfferAndEventsOrderBothWays) {
  int socks[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, socks), 0);
  const pid_t t = fork();
  if (t == 0) {
    close(socks[0]);
    const int code = deviceTrainer(socks[1]);
    std::fflush(stderr);
    _exit(code);
  }
  close(socks[1]);
  const int exporter_code = inChild([&] { return exporter(socks[0], GetParam()); });
  close(socks[0]);
  int status = 0;
  waitpid(t, &status, 0);
  const int trainer_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  if (exporter_code == kNoGpu) GTEST_SKIP() << "no GPU (the children's stderr says why)";
  EXPECT_EQ(exporter_code, 0);
  EXPECT_EQ(trainer_code, 0);
}

INSTANTIATE_TEST_SUITE_P(Exports, ClientDeviceTest,
                         ::testing::Values(cuda::ExportKind::kPosixFd, cuda::ExportKind::kLegacyIpc),
                         [](const auto& info) { return info.param == cuda::ExportKind::kPosixFd ? "PosixFd" : "LegacyIpc"; });

}  // namespace
}  // namespace gcagent::client

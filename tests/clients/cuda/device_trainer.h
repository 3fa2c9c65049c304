// A trainer process's half of the GPU tests: receives a DeclaredDevice frame (and its
// descriptor) on `sock`, maps it with the client library's device mapping, writes i to float i
// of slot 0 on its own stream, records the ready event, says 's', waits for 'c', makes its
// stream wait on the done event, and checks that the slot then holds 0.5 * i; says 'v'.
// Returns 0, 1 on a failure (printed), kNoGpu without a GPU.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <span>
#include <vector>

#include "client_device.h"
#include "shm/cuda/cuda_ipc.h"
#include "shm/fd_passing.h"
#include "shm/protocol.h"

namespace gcagent::client {

inline constexpr int kNoGpu = 77;
inline constexpr size_t kFloats = 1 << 18;

#define CHILD_CHECK(cond, ...)           \
  do {                                   \
    if (!(cond)) {                       \
      std::fprintf(stderr, __VA_ARGS__); \
      std::fprintf(stderr, "\n");        \
      return 1;                          \
    }                                    \
  } while (0)

inline bool sendByte(int sock, char c) { return write(sock, &c, 1) == 1; }
inline bool expectByte(int sock, char want) {
  char c = 0;
  return read(sock, &c, 1) == 1 && c == want;
}

inline int deviceTrainer(int sock) {
  namespace cuda = shm::cuda;
  namespace protocol = shm::protocol;

  auto loaded = cuda::CudaDriver::load();
  if (!loaded.ok()) return kNoGpu;
  const cuda::CudaDriver& d = **loaded;
  std::vector<std::byte> in(64 * 1024);
  std::vector<int> fds;
  size_t got = 0;
  for (;;) {
    const ssize_t n = shm::receiveWithFds(sock, std::span(in).subspan(got), 0, fds);
    CHILD_CHECK(n > 0, "trainer: receive");
    got += static_cast<size_t>(n);
    if (got < protocol::kHeaderBytes) continue;
    auto header = protocol::parseHeader(std::span(in).first(protocol::kHeaderBytes));
    CHILD_CHECK(header.ok(), "trainer: %s", header.status().toString().c_str());
    if (got < protocol::kHeaderBytes + header->body_bytes) continue;
    auto message = protocol::decode(*header, std::span(in).subspan(protocol::kHeaderBytes, header->body_bytes));
    CHILD_CHECK(message.ok(), "trainer: %s", message.status().toString().c_str());
    const auto& offer = std::get<protocol::DeclaredDevice>(message->body);
    const int fd = fds.empty() ? -1 : fds.front();
    CHILD_CHECK((offer.kind == protocol::DeviceHandleKind::kPosixFd) == (fd >= 0), "trainer: descriptor mismatch");
    std::shared_ptr<DeviceMapping> mapping;
    Outcome mapped = mapDevice(offer, fd, &mapping);
    if (fd >= 0) close(fd);
    CHILD_CHECK(mapped.ok(), "trainer: %s", mapped.message.c_str());
    const CUdeviceptr slot = deviceBase(*mapping) + offer.slot_offsets[0];
    CUstream stream = nullptr;
    CHILD_CHECK(d.streamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "trainer: stream");
    std::vector<float> host(kFloats);
    for (size_t i = 0; i < kFloats; ++i) host[i] = static_cast<float>(i);
    CHILD_CHECK(d.memcpyHtoDAsync(slot, host.data(), kFloats * sizeof(float), stream) == CUDA_SUCCESS,
                "trainer: upload");
    Outcome recorded = recordReady(*mapping, stream);
    CHILD_CHECK(recorded.ok(), "trainer: %s", recorded.message.c_str());
    CHILD_CHECK(sendByte(sock, 's'), "trainer: submit");
    CHILD_CHECK(expectByte(sock, 'c'), "trainer: no completion");
    Outcome waited = waitDone(*mapping, stream);
    CHILD_CHECK(waited.ok(), "trainer: %s", waited.message.c_str());
    CHILD_CHECK(d.memcpyDtoHAsync(host.data(), slot, kFloats * sizeof(float), stream) == CUDA_SUCCESS,
                "trainer: download");
    CHILD_CHECK(d.streamSynchronize(stream) == CUDA_SUCCESS, "trainer: sync");
    for (size_t i = 0; i < kFloats; ++i)
      CHILD_CHECK(host[i] == 0.5f * static_cast<float>(i), "trainer: average[%zu] is %f", i, host[i]);
    CHILD_CHECK(sendByte(sock, 'v'), "trainer: verified");
    d.streamDestroy(stream);
    return 0;
  }
}

}  // namespace gcagent::client

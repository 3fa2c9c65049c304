// CUDA IPC between two real processes: one exports cuMem device memory as a file descriptor
// over a Unix socket, the other maps it, reads what the first wrote and writes back; an
// interprocess event orders the importer's write before the exporter's read. Each side runs
// in a forked child that starts CUDA itself (a CUDA context does not survive fork); without a
// GPU the children say so and the test skips.
#include "shm/cuda/cuda_ipc.h"
#include "tests/common/child_process.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

namespace gcagent::shm::cuda {
namespace {

constexpr int kNoGpu = 77;
constexpr size_t kWords = 1 << 18;  // 1 MiB

using testing::inChild;

const CudaDriver* driverOrExit() {
  auto d = CudaDriver::load();
  if (!d.ok()) {
    std::fprintf(stderr, "%s\n", d.status().message().c_str());
    _exit(kNoGpu);
  }
  return *d;
}

#define CHILD_CHECK(cond, ...)          \
  do {                                  \
    if (!(cond)) {                      \
      std::fprintf(stderr, __VA_ARGS__); \
      std::fprintf(stderr, "\n");       \
      return 1;                         \
    }                                   \
  } while (0)

// What travels with the fd: the buffer and the event that orders writes to it.
struct Offer {
  ExportDescriptor buffer;
  CUipcEventHandle written;
};

int exporter(int sock, ExportKind kind) {
  const CudaDriver* d = driverOrExit();
  auto mem = SharedDeviceMemory::create(*d, 0, 4 * kWords, kind);
  CHILD_CHECK(mem.ok(), "exporter: %s", mem.status().toString().c_str());
  std::vector<uint32_t> words(kWords);
  for (size_t i = 0; i < kWords; ++i) words[i] = static_cast<uint32_t>(3 * i + 1);
  CHILD_CHECK(d->memcpyHtoD(mem->address(), words.data(), 4 * kWords) == CUDA_SUCCESS, "exporter: upload");
  auto written = SharedEvent::create(*d);
  CHILD_CHECK(written.ok(), "exporter: %s", written.status().toString().c_str());
  auto handle = written->handle();
  CHILD_CHECK(handle.ok(), "exporter: %s", handle.status().toString().c_str());
  const Offer offer{mem->descriptor(), *handle};
  // A legacy export has no fd of its own; the socket stands in so the framing stays the same.
  Status sent = sendFd(sock, kind == ExportKind::kPosixFd ? mem->fd() : sock, std::as_bytes(std::span(&offer, 1)));
  CHILD_CHECK(sent.ok(), "exporter: %s", sent.toString().c_str());
  char ack = 0;
  CHILD_CHECK(read(sock, &ack, 1) == 1 && ack == 'k', "exporter: no acknowledgement from the importer");
  // The importer's copy is ordered before this read by the event, not by the host.
  CUstream stream = nullptr;
  CHILD_CHECK(d->streamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "exporter: stream");
  Status waited = written->waitOn(stream);
  CHILD_CHECK(waited.ok(), "exporter: %s", waited.toString().c_str());
  CHILD_CHECK(d->memcpyDtoHAsync(words.data(), mem->address(), 4 * kWords, stream) == CUDA_SUCCESS,
              "exporter: download");
  CHILD_CHECK(d->streamSynchronize(stream) == CUDA_SUCCESS, "exporter: synchronize");
  d->streamDestroy(stream);
  for (size_t i = 0; i < kWords; ++i) {
    const uint32_t want = i < 1024 ? 0xabcd0000u + static_cast<uint32_t>(i) : static_cast<uint32_t>(3 * i + 1);
    CHILD_CHECK(words[i] == want, "exporter: word %zu is %u, expected %u", i, words[i], want);
  }
  CHILD_CHECK(write(sock, "d", 1) == 1, "exporter: done");
  return 0;
}

int importer(int sock, ExportKind kind) {
  const CudaDriver* d = driverOrExit();
  Offer offer;
  auto fd = receiveFd(sock, std::as_writable_bytes(std::span(&offer, 1)));
  CHILD_CHECK(fd.ok(), "importer: %s", fd.status().toString().c_str());
  const ExportDescriptor desc = offer.buffer;
  CHILD_CHECK(desc.bytes >= 4 * kWords, "importer: descriptor says %llu bytes",
              static_cast<unsigned long long>(desc.bytes));
  // A buffer said to live on another GPU is refused, naming both.
  ExportDescriptor elsewhere = desc;
  elsewhere.gpu[0] ^= 0xff;
  auto wrong = SharedDeviceMemory::import(*d, 0, *fd, elsewhere);
  CHILD_CHECK(!wrong.ok() && wrong.status().code() == StatusCode::kFailedPrecondition &&
                  wrong.status().message().rfind("trainer and agent see different GPUs: the buffer lives on " +
                                                     uuidText(elsewhere.gpu), 0) == 0,
              "importer: a foreign GPU was not refused: %s", wrong.status().toString().c_str());
  CHILD_CHECK(desc.kind == kind, "importer: descriptor kind %d", static_cast<int>(desc.kind));
  auto mem = SharedDeviceMemory::import(*d, 0, *fd, desc);
  close(*fd);
  CHILD_CHECK(mem.ok(), "importer: %s", mem.status().toString().c_str());
  std::vector<uint32_t> words(kWords);
  CHILD_CHECK(d->memcpyDtoH(words.data(), mem->address(), 4 * kWords) == CUDA_SUCCESS, "importer: download");
  for (size_t i = 0; i < kWords; ++i)
    CHILD_CHECK(words[i] == 3 * i + 1, "importer: word %zu is %u, expected %zu", i, words[i], 3 * i + 1);
  for (uint32_t i = 0; i < 1024; ++i) words[i] = 0xabcd0000u + i;
  auto written = SharedEvent::open(*d, offer.written);
  CHILD_CHECK(written.ok(), "importer: %s", written.status().toString().c_str());
  CUstream stream = nullptr;
  CHILD_CHECK(d->streamCreate(&stream, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS, "importer: stream");
  CHILD_CHECK(d->memcpyHtoDAsync(mem->address(), words.data(), 4 * 1024, stream) == CUDA_SUCCESS,
              "importer: upload");
  Status recorded = written->record(stream);
  CHILD_CHECK(recorded.ok(), "importer: %s", recorded.toString().c_str());
  CHILD_CHECK(write(sock, "k", 1) == 1, "importer: acknowledgement");
  // The exporter waits on the event; keep the stream and the mapping until it has read.
  char done = 0;
  CHILD_CHECK(read(sock, &done, 1) == 1 && done == 'd', "importer: no word from the exporter");
  CHILD_CHECK(d->streamSynchronize(stream) == CUDA_SUCCESS, "importer: synchronize");
  d->streamDestroy(stream);
  return 0;
}

class CudaIpcKindTest : public ::testing::TestWithParam<ExportKind> {};

TEST_P(CudaIpcKindTest, TwoProcessesShareDeviceMemory) {
  const ExportKind kind = GetParam();
  int socks[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, socks), 0);
  int importer_code = -1;
  const pid_t imp = fork();
  if (imp == 0) {
    close(socks[0]);
    const int code = importer(socks[1], kind);
    std::fflush(stderr);
    _exit(code);
  }
  close(socks[1]);
  const int exporter_code = inChild([&] { return exporter(socks[0], kind); });
  close(socks[0]);
  int status = 0;
  waitpid(imp, &status, 0);
  importer_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  if (exporter_code == kNoGpu) GTEST_SKIP() << "no GPU (the children's stderr says why)";
  EXPECT_EQ(exporter_code, 0);
  EXPECT_EQ(importer_code, 0);
}

INSTANTIATE_TEST_SUITE_P(Exports, CudaIpcKindTest, ::testing::Values(ExportKind::kPosixFd, ExportKind::kLegacyIpc),
                         [](const auto& info) { return info.param == ExportKind::kPosixFd ? "PosixFd" : "LegacyIpc"; });

// The fd passing itself, with a pipe: runs everywhere.
TEST(CudaIpcTest, FileDescriptorAndPayloadCrossAUnixSocket) {
  int socks[2], pipe_fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, socks), 0);
  ASSERT_EQ(pipe(pipe_fds), 0);
  const uint64_t payload = 0x1122334455667788ull;
  ASSERT_TRUE(sendFd(socks[0], pipe_fds[1], std::as_bytes(std::span(&payload, 1))).ok());
  uint64_t got = 0;
  auto fd = receiveFd(socks[1], std::as_writable_bytes(std::span(&got, 1)));
  ASSERT_TRUE(fd.ok()) << fd.status().toString();
  EXPECT_EQ(got, payload);
  EXPECT_NE(*fd, pipe_fds[1]);
  ASSERT_EQ(write(*fd, "gc", 2), 2);
  char buf[2];
  ASSERT_EQ(read(pipe_fds[0], buf, 2), 2);
  EXPECT_EQ(std::memcmp(buf, "gc", 2), 0);
  for (int f : {socks[0], socks[1], pipe_fds[0], pipe_fds[1], *fd}) close(f);
}

TEST(CudaIpcTest, AMessageWithoutADescriptorIsRefused) {
  int socks[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, socks), 0);
  ASSERT_EQ(write(socks[0], "12345678", 8), 8);
  uint64_t got = 0;
  auto fd = receiveFd(socks[1], std::as_writable_bytes(std::span(&got, 1)));
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().toString(), "data_loss: the message carried no file descriptor");
  close(socks[0]);
  close(socks[1]);
}

}  // namespace
}  // namespace gcagent::shm::cuda

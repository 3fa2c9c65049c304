// The agent's CUDA device path (agent/coding/device_path_cuda.cc) on a real GPU, against a trainer
// process that maps the offer with the client library: the offer travels as the agent sends it
// (descriptor on the frame's first byte), stageIn waits for the trainer's ready event and
// brings its gradient to the host, stageOut writes the average back and records the done
// event the trainer's stream waits on. Also the refusal of a GPU the agent does not see. Both
// sides run in forked children that start CUDA themselves; without a GPU the test skips.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>

#include "agent/coding/device_path.h"
#include "device_trainer.h"
#include "shm/cuda/cuda_ipc.h"
#include "tests/common/child_process.h"

namespace gcagent::agent {
namespace {

using client::expectByte;
using client::kFloats;
using client::kNoGpu;
using client::sendByte;
namespace cuda = shm::cuda;
namespace protocol = shm::protocol;

// Runs the io context until `done` has been called once; returns its status. The report is
// posted from the driver's thread once the stream gets there, so the context must not run dry.
Status runUntilDone(asio::io_context& io, const std::function<void(DevicePath::Done)>& start) {
  bool called = false;
  Status result;
  start([&](const Status& s) {
    called = true;
    result = s;
  });
  io.restart();
  auto guard = asio::make_work_guard(io);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!called && std::chrono::steady_clock::now() < deadline) io.run_one_for(std::chrono::milliseconds(100));
  return called ? result : Status::deadlineExceeded("the copy did not report within 30 s");
}

int agentSide(int sock) {
  auto driver = cuda::CudaDriver::load();
  if (!driver.ok()) {
    std::fprintf(stderr, "%s\n", driver.status().message().c_str());
    return kNoGpu;
  }
  auto mine = cuda::useDevice(**driver, 0);
  CHILD_CHECK(mine.ok(), "agent: %s", mine.status().toString().c_str());
  protocol::GpuUuidBytes gpu;
  std::memcpy(gpu.data(), mine->data(), gpu.size());

  asio::io_context io;
  auto path = makeDevicePath(io);
  protocol::GpuUuidBytes elsewhere = gpu;
  elsewhere[0] ^= 0xff;
  const std::vector<uint64_t> bytes{kFloats * sizeof(float), 1000};
  auto refused = path->allocate(elsewhere, bytes);
  const std::string why = refused.ok() ? "" : refused.status().message();
  CHILD_CHECK(why.starts_with("the trainer's tensors live on " + gpuUuidText(elsewhere) +
                              ", which this agent does not see (it sees gpu 0 (" + cuda::uuidText(*mine) + ")") &&
                  why.ends_with("); give the agent the trainer's GPU (CUDA_VISIBLE_DEVICES)"),
              "agent: refusal was: %s", why.c_str());

  auto slots = path->allocate(gpu, bytes);
  CHILD_CHECK(slots.ok(), "agent: %s", slots.status().toString().c_str());
  DeviceSlots& s = **slots;
  CHILD_CHECK(s.offer().slot_offsets == (std::vector<uint64_t>{0, kFloats * sizeof(float)}), "agent: offsets");
  CHILD_CHECK(s.offer().gpu == gpu, "agent: offer names another GPU");
  const auto frame = protocol::encode({1, s.offer()});
  if (s.fd() >= 0) {
    Status sent = shm::sendFd(sock, s.fd(), frame);
    CHILD_CHECK(sent.ok(), "agent: %s", sent.toString().c_str());
  } else {
    CHILD_CHECK(write(sock, frame.data(), frame.size()) == static_cast<ssize_t>(frame.size()), "agent: send");
  }
  CHILD_CHECK(expectByte(sock, 's'), "agent: no submit");
  float* host = s.hostBuffer(0);
  Status in = runUntilDone(io, [&](DevicePath::Done done) { path->stageIn(s, 0, kFloats, std::move(done)); });
  CHILD_CHECK(in.ok(), "agent: stage in: %s", in.toString().c_str());
  for (size_t i = 0; i < kFloats; ++i)
    CHILD_CHECK(host[i] == static_cast<float>(i), "agent: gradient[%zu] is %f", i, host[i]);
  for (size_t i = 0; i < kFloats; ++i) host[i] = 0.5f * static_cast<float>(i);
  Status out = runUntilDone(io, [&](DevicePath::Done done) { path->stageOut(s, 0, kFloats, std::move(done)); });
  CHILD_CHECK(out.ok(), "agent: stage out: %s", out.toString().c_str());
  CHILD_CHECK(sendByte(sock, 'c'), "agent: complete");
  CHILD_CHECK(expectByte(sock, 'v'), "agent: the trainer did not verify");
  return 0;
}

using testing::inChild;

TEST(CudaDevicePathTest, StagesATrainersGradientInAndTheAverageOutInOrder) {
  int socks[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, socks), 0);
  const pid_t t = fork();
  if (t == 0) {
    close(socks[0]);
    const int code = client::deviceTrainer(socks[1]);
    std::fflush(stderr);
    _exit(code);
  }
  close(socks[1]);
  const int agent_code = inChild([&] { return agentSide(socks[0]); });
  close(socks[0]);
  int status = 0;
  waitpid(t, &status, 0);
  const int trainer_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  if (agent_code == kNoGpu) GTEST_SKIP() << "no GPU (the children's stderr says why)";
  EXPECT_EQ(agent_code, 0);
  EXPECT_EQ(trainer_code, 0);
}

}  // namespace
}  // namespace gcagent::agent

// The agent's handling of device tensors, on the CPU: a real ControlServer and engine on a
// real Unix socket, trainers speaking the real protocol, and a DevicePath whose "device
// memory" is a memfd. That exercises everything between the socket and the GPU: the offer
// with its descriptor (SCM_RIGHTS), slots staged in and out around the engine or reduced in
// place by a LocalCoder (on the host device here), mixed host and device trainers in one
// job, and the refusal of a trainer on another GPU.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "agent/control/control_server.h"
#include "agent/coding/device_path.h"
#include "agent/coding/host_coder_device.h"
#include "agent/engine/reduction_engine.h"
#include "common/str_cat.h"
#include "shm/fd_passing.h"
#include "shm/protocol.h"
#include "shm/segment.h"
#include "tests/common/wait_for.h"
#include "transport/loopback/loopback.h"

namespace gcagent::agent {
namespace {

namespace protocol = shm::protocol;

protocol::GpuUuidBytes uuid(uint8_t seed) {
  protocol::GpuUuidBytes u{};
  for (size_t i = 0; i < u.size(); ++i) u[i] = static_cast<uint8_t>(seed + i);
  return u;
}

const protocol::GpuUuidBytes kAgentGpu = uuid(0x40);

// Device memory stood in for by a memfd the trainer maps: the staging copies are memcpy.
class MemfdSlots : public DeviceSlots {
 public:
  ~MemfdSlots() override {
    if (base != nullptr) ::munmap(base, bytes);
    if (fd_ >= 0) ::close(fd_);
  }
  const protocol::DeclaredDevice& offer() const override { return offer_; }
  int fd() const override { return fd_; }
  float* hostBuffer(size_t index) override { return host.at(index).data(); }
  float* deviceBuffer(size_t index) override {
    return reinterpret_cast<float*>(base + offer_.slot_offsets.at(index));
  }
  std::shared_ptr<LocalCoder> coder() override { return coder_; }

  std::shared_ptr<LocalCoder> coder_;
  int fd_ = -1;
  std::byte* base = nullptr;
  size_t bytes = 0;
  std::vector<std::vector<float>> host;
  protocol::DeclaredDevice offer_;
};

class MemfdDevicePath : public DevicePath {
 public:
  // `coded`: the slots reduce in place through a LocalCoder, as on a GPU.
  MemfdDevicePath(asio::io_context& io, bool coded)
      : io_(io), coder_(coded ? std::make_shared<LocalCoder>(makeHostCoderDevice(io)) : nullptr) {}

  Result<std::unique_ptr<DeviceSlots>> allocate(const protocol::GpuUuidBytes& trainer_gpu,
                                                std::span<const uint64_t> slot_bytes) override {
    if (trainer_gpu != kAgentGpu)
      return Status::failedPrecondition(strCat("the trainer's tensors live on ", gpuUuidText(trainer_gpu),
                                               ", this test's agent uses ", gpuUuidText(kAgentGpu)));
    auto slots = std::make_unique<MemfdSlots>();
    slots->coder_ = coder_;
    for (uint64_t b : slot_bytes) {
      slots->offer_.slot_offsets.push_back(slots->bytes);
      slots->bytes += (b + 255) / 256 * 256;
      slots->host.emplace_back(b / sizeof(float), -1.0f);
    }
    slots->fd_ = ::memfd_create("gcagent-device-test", MFD_CLOEXEC);
    if (slots->fd_ < 0 || ::ftruncate(slots->fd_, static_cast<off_t>(slots->bytes)) != 0)
      return Status::unavailable(strCat("memfd: ", std::strerror(errno)));
    slots->base = static_cast<std::byte*>(::mmap(nullptr, slots->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, slots->fd_, 0));
    slots->offer_.kind = protocol::DeviceHandleKind::kPosixFd;
    slots->offer_.gpu = kAgentGpu;
    slots->offer_.allocation_bytes = slots->bytes;
    slots->offer_.ready_event.fill(0x11);
    slots->offer_.done_event.fill(0x22);
    return std::unique_ptr<DeviceSlots>(std::move(slots));
  }

  void stageIn(DeviceSlots& s, size_t index, uint64_t elements, Done done) override {
    auto& slots = static_cast<MemfdSlots&>(s);
    std::memcpy(slots.hostBuffer(index), slots.base + slots.offer_.slot_offsets.at(index), elements * sizeof(float));
    ++staged_in;
    if (hold_stage_in) {  // finishes when the test says so (on the io thread, as here)
      held_.push_back(std::move(done));
      return;
    }
    asio::post(io_, [done = std::move(done)] { done({}); });  // later, as a GPU copy would finish
  }

  // With hold_stage_in: the copies in that have not finished yet (read on the io thread), and
  // finishing them.
  size_t held() {
    std::promise<size_t> p;
    asio::post(io_, [&] { p.set_value(held_.size()); });
    return p.get_future().get();
  }
  void releaseHeld() {
    asio::post(io_, [this] {
      for (Done& done : std::exchange(held_, {})) done({});
    });
  }

  void stageOut(DeviceSlots& s, size_t index, uint64_t elements, Done done) override {
    auto& slots = static_cast<MemfdSlots&>(s);
    std::memcpy(slots.base + slots.offer_.slot_offsets.at(index), slots.hostBuffer(index), elements * sizeof(float));
    ++staged_out;
    asio::post(io_, [done = std::move(done)] { done({}); });
  }

  Status awaitReady(DeviceSlots&) override {
    ++awaited;
    return {};
  }
  void signalDone(DeviceSlots&, Done done) override {
    ++signaled;
    asio::post(io_, [done = std::move(done)] { done({}); });
  }

  std::atomic<int> staged_in{0};
  std::atomic<int> staged_out{0};
  std::atomic<int> awaited{0};
  std::atomic<int> signaled{0};
  std::atomic<bool> hold_stage_in{false};

 private:
  asio::io_context& io_;
  std::vector<Done> held_;
  std::shared_ptr<LocalCoder> coder_;
};

// One agent node: engine, control server and the io thread they run on.
class Agent {
 public:
  explicit Agent(const std::string& socket, bool coded = false) : transports_(transport::makeLoopbackGroup(1)) {
    path_ = std::make_shared<MemfdDevicePath>(io_, coded);
    EngineOptions engine_options;
    engine_options.host_stream = std::make_shared<HostStream>(io_);
    engine_ = std::make_unique<ReductionEngine>(*transports_[0], engine_options,
                                                [this](uint64_t job, uint64_t it, uint64_t key, const Status& s,
                                                       std::optional<uint32_t> reload_root) {
                                                  server_->onReduced(job, it, key, s, reload_root);
                                                });
    EXPECT_TRUE(transports_[0]->connect({}).ok());
    ServerOptions options;
    options.socket_path = socket;
    options.shm_prefix = "gcadevtest" + std::to_string(::getpid());
    options.device_path = path_;
    server_ = std::make_unique<ControlServer>(io_, *engine_, options);
    EXPECT_TRUE(server_->start().ok());
    thread_ = std::thread([this] {
      auto work = asio::make_work_guard(io_);
      io_.run();
    });
  }
  ~Agent() {
    asio::post(io_, [this] { server_->stop(Status::unavailable("test over")); io_.stop(); });
    thread_.join();
  }

  MemfdDevicePath& path() { return *path_; }
  // gcagent_gpu_copy_bytes_total{direction = to_host ? "sent" : "received"}
  double gpuCopied(bool to_host) {
    std::promise<double> p;
    asio::post(io_, [&] { p.set_value(engine_->stats().gpuCopy(to_host).Value()); });
    return p.get_future().get();
  }
  // Read on the io thread: the server is not thread-safe.
  ServerCounters counters() {
    std::promise<ServerCounters> p;
    asio::post(io_, [&] { p.set_value(server_->counters()); });
    return p.get_future().get();
  }

 private:
  asio::io_context io_;
  std::vector<std::unique_ptr<transport::Transport>> transports_;
  std::shared_ptr<MemfdDevicePath> path_;
  std::unique_ptr<ReductionEngine> engine_;
  std::unique_ptr<ControlServer> server_;
  std::thread thread_;
};

// A trainer speaking the protocol on a blocking socket, keeping the descriptors it receives.
class Trainer {
 public:
  explicit Trainer(const std::string& socket) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
    timeval tv{10, 0};  // a test that hangs fails instead
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Trainer() {
    for (int fd : fds) ::close(fd);
    ::close(fd_);
  }

  void send(const protocol::Message& m) {
    auto frame = protocol::encode(m);
    ASSERT_EQ(::send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL), static_cast<ssize_t>(frame.size()));
  }

  protocol::Message receive() {
    std::vector<std::byte> header(protocol::kHeaderBytes);
    readExactly(header);
    auto h = protocol::parseHeader(header);
    EXPECT_TRUE(h.ok()) << h.status().toString();
    if (!h.ok()) return {};
    std::vector<std::byte> body(h->body_bytes);
    readExactly(body);
    auto m = protocol::decode(*h, body);
    EXPECT_TRUE(m.ok()) << m.status().toString();
    return m.ok() ? *m : protocol::Message{};
  }

  template <class T>
  T expect(const protocol::Message& m) {
    const T* body = std::get_if<T>(&m.body);
    if (body == nullptr) {
      const auto* e = std::get_if<protocol::Error>(&m.body);
      ADD_FAILURE() << "unexpected message type " << m.body.index() << (e ? ": " + e->message : "");
      return T{};
    }
    return *body;
  }

  void join(const std::string& job, uint32_t rank, uint32_t size) {
    send({1, protocol::Hello{job, rank, size, 1}});
    expect<protocol::Welcome>(receive());
  }

  std::vector<int> fds;
  int fd() const { return fd_; }

 private:
  void readExactly(std::span<std::byte> out) {
    size_t got = 0;
    while (got < out.size()) {
      const ssize_t n = shm::receiveWithFds(fd_, out.subspan(got), 0, fds);
      ASSERT_GT(n, 0) << (n < 0 ? std::strerror(errno) : "the agent closed the connection");
      got += static_cast<size_t>(n);
    }
  }
  int fd_ = -1;
};

// The trainer's mapping of the offer: slot i of `elements[i]` floats.
struct Mapped {
  std::byte* base = nullptr;
  size_t bytes = 0;
  ~Mapped() {
    if (base != nullptr) ::munmap(base, bytes);
  }
  float* slot(const protocol::DeclaredDevice& offer, size_t i) const {
    return reinterpret_cast<float*>(base + offer.slot_offsets[i]);
  }
};

class DeviceSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("gcagent-device-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    socket_ = (dir_ / "agent.sock").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  std::string socket_;
};

std::vector<protocol::TensorDecl> tensors() {
  return {{1, 1000, protocol::DType::kFloat32, 0, "none", {}}, {2, 70, protocol::DType::kFloat32, -1, "none", {}}};
}

// Declares tensors() on the agent's GPU and takes the offer.
void declare(Trainer& t) {
  t.send({2, protocol::DeclareDevice{kAgentGpu, tensors()}});
  t.expect<protocol::DeclaredDevice>(t.receive());
}

void deviceTrainerGetsItsSlotsAndTheAverageInThem(const std::string& socket_, bool coded) {
  Agent agent(socket_, coded);
  Trainer t(socket_);
  t.join("job", 0, 1);
  t.send({2, protocol::DeclareDevice{kAgentGpu, tensors()}});
  const auto offer = t.expect<protocol::DeclaredDevice>(t.receive());
  ASSERT_EQ(t.fds.size(), 1u) << "the offer's descriptor travels with it";
  EXPECT_EQ(offer.gpu, kAgentGpu);
  EXPECT_EQ(offer.slot_offsets, (std::vector<uint64_t>{0, 4096}));
  EXPECT_EQ(offer.allocation_bytes, 4096u + 512u);
  Mapped m{static_cast<std::byte*>(::mmap(nullptr, offer.allocation_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                                          t.fds[0], 0)),
           offer.allocation_bytes};
  ASSERT_NE(m.base, MAP_FAILED);
  for (uint64_t it = 1; it <= 3; ++it) {
    for (size_t i = 0; i < 1000; ++i) m.slot(offer, 0)[i] = static_cast<float>(i) * it;
    for (size_t i = 0; i < 70; ++i) m.slot(offer, 1)[i] = -0.5f * i;
    t.send({10 + static_cast<uint32_t>(it), protocol::Submit{it, {1, 2}}});
    std::set<uint64_t> done;
    for (int k = 0; k < 2; ++k) {
      auto c = t.expect<protocol::Complete>(t.receive());
      EXPECT_EQ(c.iteration, it);
      done.insert(c.keys.begin(), c.keys.end());
    }
    EXPECT_EQ(done, (std::set<uint64_t>{1, 2}));
    // One trainer: the average is its own gradient, written back into the device slot.
    for (size_t i = 0; i < 1000; i += 111) EXPECT_EQ(m.slot(offer, 0)[i], static_cast<float>(i) * it);
  }
  EXPECT_EQ(agent.path().awaited.load(), 6);
  EXPECT_EQ(agent.path().staged_in.load(), coded ? 0 : 6);
  EXPECT_EQ(agent.path().staged_out.load(), coded ? 0 : 6);
  EXPECT_EQ(agent.path().signaled.load(), coded ? 6 : 0);
  // A node on its own averages on the GPU: nothing crosses PCIe. Staged: every gradient, both ways.
  const double staged = 3 * (1000 + 70) * sizeof(float);
  EXPECT_EQ(agent.gpuCopied(true), coded ? 0 : staged);
  EXPECT_EQ(agent.gpuCopied(false), coded ? 0 : staged);
}

TEST_F(DeviceSessionTest, DeviceTrainerGetsItsSlotsThroughTheSocketAndTheAverageInThem) {
  deviceTrainerGetsItsSlotsAndTheAverageInThem(socket_, false);
}

TEST_F(DeviceSessionTest, WithACoderTheSlotsAreReducedInPlaceWithoutStaging) {
  deviceTrainerGetsItsSlotsAndTheAverageInThem(socket_, true);
}

TEST_F(DeviceSessionTest, TwoDeviceTrainersOnOneGpuAverageThroughTheCoder) {
  Agent agent(socket_, /*coded=*/true);
  Trainer a(socket_), b(socket_);
  a.join("pair", 0, 2);
  b.join("pair", 1, 2);
  std::vector<std::unique_ptr<Mapped>> mapped;
  std::vector<protocol::DeclaredDevice> offers;
  for (Trainer* t : {&a, &b}) {
    t->send({2, protocol::DeclareDevice{kAgentGpu, tensors()}});
    offers.push_back(t->expect<protocol::DeclaredDevice>(t->receive()));
    ASSERT_EQ(t->fds.size(), 1u);
    auto m = std::make_unique<Mapped>();  // built in place: a copy would unmap on destruction
    m->bytes = offers.back().allocation_bytes;
    m->base = static_cast<std::byte*>(::mmap(nullptr, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, t->fds[0], 0));
    ASSERT_NE(m->base, MAP_FAILED);
    mapped.push_back(std::move(m));
  }
  for (uint64_t it = 1; it <= 2; ++it) {
    for (size_t i = 0; i < 1000; ++i) {
      mapped[0]->slot(offers[0], 0)[i] = static_cast<float>(i);
      mapped[1]->slot(offers[1], 0)[i] = static_cast<float>(it);
    }
    a.send({3, protocol::Submit{it, {1}}});
    b.send({3, protocol::Submit{it, {1}}});
    EXPECT_EQ(a.expect<protocol::Complete>(a.receive()).keys, std::vector<uint64_t>{1});
    EXPECT_EQ(b.expect<protocol::Complete>(b.receive()).keys, std::vector<uint64_t>{1});
    for (size_t i = 0; i < 1000; ++i) {
      const float want = (static_cast<float>(i) + static_cast<float>(it)) / 2;
      ASSERT_EQ(mapped[0]->slot(offers[0], 0)[i], want) << i;
      ASSERT_EQ(mapped[1]->slot(offers[1], 0)[i], want) << i;
    }
  }
  EXPECT_EQ(agent.path().staged_in.load(), 0);
  EXPECT_EQ(agent.path().signaled.load(), 4);
}

TEST_F(DeviceSessionTest, ATrainerLeavingFailsItsJobOnTheCoderAndTheAgentGoesOn) {
  Agent agent(socket_, /*coded=*/true);
  Trainer a(socket_);
  {
    Trainer b(socket_);
    a.join("lost", 0, 2);
    b.join("lost", 1, 2);
    declare(a);
    declare(b);
    a.send({3, protocol::Submit{1, {1}}});
  }  // b leaves without submitting
  const auto reply = a.receive();
  const auto error = a.expect<protocol::Error>(reply);
  EXPECT_EQ(reply.request_id, 3u);
  EXPECT_NE(error.message.find("trainer local rank 1 of job 'lost' left"), std::string::npos) << error.message;
  // Another job on the same GPU reduces on the coder as before.
  Trainer c(socket_);
  c.join("next", 0, 1);
  declare(c);
  c.send({4, protocol::Submit{1, {1, 2}}});
  std::set<uint64_t> done;
  for (int k = 0; k < 2; ++k) {
    const auto complete = c.expect<protocol::Complete>(c.receive());
    done.insert(complete.keys.begin(), complete.keys.end());
  }
  EXPECT_EQ(done, (std::set<uint64_t>{1, 2}));
  EXPECT_EQ(agent.path().staged_in.load(), 0);
}

TEST_F(DeviceSessionTest, AHostTrainerLeavingWhileTheDeviceSlotIsStagedFailsTheReductionSafely) {
  Agent agent(socket_, /*coded=*/true);
  agent.path().hold_stage_in = true;
  Trainer device(socket_);
  device.join("mixed", 0, 2);
  device.send({2, protocol::DeclareDevice{kAgentGpu, tensors()}});
  device.expect<protocol::DeclaredDevice>(device.receive());
  {
    Trainer host(socket_);
    host.join("mixed", 1, 2);
    host.send({2, protocol::Declare{tensors()}});
    host.expect<protocol::Declared>(host.receive());
    device.send({3, protocol::Submit{1, {1}}});
    host.send({3, protocol::Submit{1, {1}}});
    ASSERT_TRUE(gcagent::testing::waitFor([&] { return agent.path().held() != 0; }));
    ASSERT_EQ(agent.path().held(), 1u) << "the device slot is being staged";
  }  // the host trainer leaves: its segment goes with it
  ASSERT_TRUE(gcagent::testing::waitFor([&] { return agent.counters().trainers_connected == 1; }));
  agent.path().releaseHeld();
  const auto reply = device.receive();
  const auto error = device.expect<protocol::Error>(reply);
  EXPECT_EQ(reply.request_id, 3u);
  EXPECT_EQ(error.message, "tensor 1 iteration 1: a trainer of the job left") << error.message;
}

TEST_F(DeviceSessionTest, HostAndDeviceTrainersOfOneJobAverageTogether) {
  // With a coder too: a host trainer in the job sends the device slot through the host.
  Agent agent(socket_, /*coded=*/true);
  Trainer device(socket_), host(socket_);
  device.join("mixed", 0, 2);
  host.join("mixed", 1, 2);
  device.send({2, protocol::DeclareDevice{kAgentGpu, tensors()}});
  const auto offer = device.expect<protocol::DeclaredDevice>(device.receive());
  ASSERT_EQ(device.fds.size(), 1u);
  host.send({2, protocol::Declare{tensors()}});
  const auto declared = host.expect<protocol::Declared>(host.receive());
  EXPECT_TRUE(host.fds.empty()) << "a host declaration carries no descriptor";
  Mapped m{static_cast<std::byte*>(::mmap(nullptr, offer.allocation_bytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                                          device.fds[0], 0)),
           offer.allocation_bytes};
  auto segment = shm::Segment::open(declared.segment);
  ASSERT_TRUE(segment.ok()) << segment.status().toString();
  float* host_slot = reinterpret_cast<float*>(segment->bytes().data() + declared.slot_offsets[0]);
  for (size_t i = 0; i < 1000; ++i) {
    m.slot(offer, 0)[i] = 3.0f;
    host_slot[i] = static_cast<float>(i);
  }
  device.send({3, protocol::Submit{1, {1}}});
  host.send({3, protocol::Submit{1, {1}}});
  EXPECT_EQ(device.expect<protocol::Complete>(device.receive()).keys, std::vector<uint64_t>{1});
  EXPECT_EQ(host.expect<protocol::Complete>(host.receive()).keys, std::vector<uint64_t>{1});
  for (size_t i = 0; i < 1000; ++i) {
    const float want = (3.0f + static_cast<float>(i)) / 2;
    ASSERT_EQ(m.slot(offer, 0)[i], want) << i;
    ASSERT_EQ(host_slot[i], want) << i;
  }
  EXPECT_EQ(agent.path().staged_in.load(), 1);
  EXPECT_EQ(agent.path().staged_out.load(), 1);
  EXPECT_EQ(agent.path().signaled.load(), 0);
}

TEST_F(DeviceSessionTest, TrainerOnAnotherGpuIsRefusedAndTheJobGoesOn) {
  Agent agent(socket_);
  Trainer t(socket_);
  t.join("job", 0, 1);
  t.send({5, protocol::DeclareDevice{uuid(0x90), tensors()}});
  const auto reply = t.receive();
  const auto error = t.expect<protocol::Error>(reply);
  EXPECT_EQ(reply.request_id, 5u);
  EXPECT_EQ(error.code, StatusCode::kFailedPrecondition);
  EXPECT_EQ(error.message, "the trainer's tensors live on GPU-90919293-9495-9697-9899-9a9b9c9d9e9f, this test's "
                           "agent uses GPU-40414243-4445-4647-4849-4a4b4c4d4e4f");
  EXPECT_TRUE(t.fds.empty());
  ServerCounters counters = agent.counters();
  EXPECT_EQ(counters.device_refused, 1u);
  EXPECT_EQ(counters.bad_messages, 0u);
  // A device declaration out of turn is a bad message, not a GPU the agent lacks.
  Trainer early(socket_);
  early.send({1, protocol::DeclareDevice{kAgentGpu, tensors()}});
  EXPECT_EQ(early.expect<protocol::Error>(early.receive()).message, "declare before hello");
  counters = agent.counters();
  EXPECT_EQ(counters.device_refused, 1u);
  EXPECT_EQ(counters.bad_messages, 1u);
  // Submitting before any accepted declaration is refused as before.
  t.send({6, protocol::Submit{1, {1}}});
  EXPECT_EQ(t.expect<protocol::Error>(t.receive()).message, "submit before declare");
  // The same connection declares on the host and reduces.
  t.send({7, protocol::Declare{tensors()}});
  const auto declared = t.expect<protocol::Declared>(t.receive());
  auto segment = shm::Segment::open(declared.segment);
  ASSERT_TRUE(segment.ok());
  reinterpret_cast<float*>(segment->bytes().data() + declared.slot_offsets[1])[0] = 42.0f;
  t.send({8, protocol::Submit{1, {2}}});
  EXPECT_EQ(t.expect<protocol::Complete>(t.receive()).keys, std::vector<uint64_t>{2});
  EXPECT_EQ(reinterpret_cast<float*>(segment->bytes().data() + declared.slot_offsets[1])[0], 42.0f);
}

TEST_F(DeviceSessionTest, AgentWithoutADevicePathSaysWhy) {
  auto path = makeUnavailableDevicePath("no GPU: cannot load libcuda.so.1: it is not installed");
  auto refused = path->allocate(uuid(1), std::vector<uint64_t>{4});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            "the trainer's tensors live on GPU-01020304-0506-0708-090a-0b0c0d0e0f10, but this agent has no GPU "
            "(cannot load libcuda.so.1: it is not installed); declare host tensors instead");
}


// A trainer process that gave its agent up as frozen connects again while its old connection
// is still open: the new connection takes the rank over, the step waiting on the old one
// fails, the old connection is closed, and the job goes on with no leave (no job notice).
TEST_F(DeviceSessionTest, TheSameProcessConnectingAgainTakesItsRankOverAndTheJobGoesOn) {
  Agent agent(socket_, /*coded=*/true);
  Trainer a(socket_);
  Trainer old(socket_);
  a.join("again", 0, 2);
  old.join("again", 1, 2);
  declare(a);
  declare(old);
  a.send({3, protocol::Submit{1, {1}}});  // waits for local rank 1
  Trainer again(socket_);                  // this process, as the old connection's is
  again.join("again", 1, 2);
  const auto reply = a.receive();
  EXPECT_EQ(reply.request_id, 3u);
  const auto error = a.expect<protocol::Error>(reply);
  EXPECT_NE(error.message.find("local rank 1 of job 'again' connected again"), std::string::npos) << error.message;
  char byte;
  EXPECT_EQ(::recv(old.fd(), &byte, 1, 0), 0) << "the old connection is closed";
  declare(again);
  a.send({4, protocol::Submit{2, {1, 2}}});
  again.send({4, protocol::Submit{2, {1, 2}}});
  for (Trainer* t : {&a, &again}) {
    std::set<uint64_t> done;
    for (int k = 0; k < 2; ++k) {
      const auto complete = t->expect<protocol::Complete>(t->receive());
      EXPECT_EQ(complete.iteration, 2u);
      done.insert(complete.keys.begin(), complete.keys.end());
    }
    EXPECT_EQ(done, (std::set<uint64_t>{1, 2}));
  }
  const ServerCounters counters = agent.counters();
  EXPECT_EQ(counters.trainers_reconnected, 1u);
  EXPECT_EQ(counters.trainers_connected, 2u);
}

// Another process claiming a rank that is connected is refused, naming the holder.
TEST_F(DeviceSessionTest, AnotherProcessClaimingAConnectedRankIsRefusedNamingTheHolder) {
  Agent agent(socket_);
  Trainer holder(socket_);
  holder.join("held", 0, 1);
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // raw calls only: the child of a threaded process
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) ::_exit(1);
    const auto frame = protocol::encode({1, protocol::Hello{"held", 0, 1, static_cast<uint32_t>(::getpid())}});
    if (::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(frame.size())) ::_exit(2);
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
      if (::write(pipe_fds[1], buf, static_cast<size_t>(n)) != n) ::_exit(3);
      if (std::string_view(buf, static_cast<size_t>(n)).find("place") != std::string_view::npos) break;
    }
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(status, 0);
  EXPECT_NE(got.find(strCat("job 'held': local rank 0 is already connected (trainer 1, pid ", ::getpid(),
                            "); only that process may connect again in its place")),
            std::string::npos)
      << got;
  EXPECT_EQ(agent.counters().trainers_reconnected, 0u);
}

}  // namespace
}  // namespace gcagent::agent

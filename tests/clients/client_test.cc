// The C client library against a scripted agent that speaks the real protocol over a real Unix
// socket and hands out real shared-memory segments (scripted_agent.h).
#include "gcagent_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "scripted_agent.h"
#include "tests/common/wait_for.h"

namespace gcagent::client::testing {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

long long msSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// How many mappings of a shared-memory segment this process holds (the scripted agent's and the
// client's live in the same process).
int mappings(const std::string& segment) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line)) n += line.find("/dev/shm/" + segment) != std::string::npos;
  return n;
}

// Descriptors this process has open: a received fd the client forgot would show here.
int openFds() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

bool hostHasGpu() {
  uint8_t uuid[16];
  return gcagent_gpu_uuid(0, uuid) == GCAGENT_OK;
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gcagent-client-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    agent_ = std::make_unique<ScriptedAgent>(dir_);
  }

  void TearDown() override {
    gcagent_close(client_);
    agent_.reset();
    std::filesystem::remove_all(dir_);
  }

  void connect() {
    agent_->start();
    ASSERT_EQ(gcagent_connect(agent_->socketPath().c_str(), "job", 0, 1, 2000, &client_), GCAGENT_OK)
        << gcagent_last_error(nullptr);
  }

  // Declares keys with the given element counts.
  int declare(const std::vector<std::pair<uint64_t, uint64_t>>& tensors, const char* codec = "none") {
    static const char* const kKeys[] = {"threshold"};
    static const char* const kValues[] = {"0.5"};
    std::vector<gcagent_tensor> decls;
    int32_t priority = 0;
    for (auto [key, elements] : tensors) decls.push_back({key, elements, priority--, codec, kKeys, kValues, 1});
    return gcagent_declare(client_, decls.data(), decls.size());
  }

  void fill(uint64_t key, float base) {
    float* b = gcagent_buffer(client_, key);
    ASSERT_NE(b, nullptr);
    for (uint64_t i = 0; i < gcagent_buffer_elements(client_, key); ++i) b[i] = base + static_cast<float>(i) * 0.25f;
  }

  // The scripted agent adds 1 to every element it completes.
  void expectReduced(uint64_t key, float base) {
    const float* b = gcagent_buffer(client_, key);
    ASSERT_NE(b, nullptr);
    for (uint64_t i = 0; i < gcagent_buffer_elements(client_, key); ++i)
      ASSERT_EQ(b[i], base + static_cast<float>(i) * 0.25f + 1.0f) << "key " << key << " index " << i;
  }

  std::string lastError() const { return gcagent_last_error(client_); }

  // Keys 10, 11 and 12 of iteration 1 submitted as {10} then {11, 12}; the scripted agent
  // answers the second submit first, key 12 then 11, and then key 10.
  void submitThreeKeysCompletedInReverse() {
    connect();
    ASSERT_EQ(declare({{10, 64}, {11, 3}, {12, 1000}}), GCAGENT_OK) << lastError();
    agent_->on_submit = ScriptedAgent::OnSubmit::kCompleteSplitReversed;
    agent_->hold_submits = 2;
    for (uint64_t key : {10, 11, 12}) fill(key, static_cast<float>(key));
    const uint64_t first[] = {10}, rest[] = {11, 12};
    ASSERT_EQ(gcagent_submit(client_, 1, first, 1), GCAGENT_OK) << lastError();
    ASSERT_EQ(gcagent_submit(client_, 1, rest, 2), GCAGENT_OK) << lastError();
  }

  int declareDevice(uint64_t key, uint64_t elements) {
    static const uint8_t kGpu[16] = {0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const gcagent_tensor t{key, elements, 0, nullptr, nullptr, nullptr, 0};
    return gcagent_declare_device(client_, &t, 1, kGpu);
  }

  std::string dir_;
  std::unique_ptr<ScriptedAgent> agent_;
  gcagent_client* client_ = nullptr;
};

TEST_F(ClientTest, ConnectDeclareSubmitWaitRoundTrip) {
  connect();
  EXPECT_EQ(gcagent_trainer_id(client_), 7u);
  EXPECT_EQ(gcagent_node_rank(client_), 1u);
  EXPECT_EQ(gcagent_node_count(client_), 2u);
  ASSERT_EQ(declare({{10, 100}, {11, 1}, {12, 40000}}), GCAGENT_OK) << lastError();
  const uint64_t keys[] = {10, 11, 12};
  for (uint64_t key : keys) {
    ASSERT_NE(gcagent_buffer(client_, key), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(gcagent_buffer(client_, key)) % 64, 0u);
  }
  EXPECT_EQ(gcagent_buffer_elements(client_, 12), 40000u);
  for (uint64_t it = 1; it <= 3; ++it) {
    for (uint64_t key : keys) fill(key, static_cast<float>(it * 100 + key));
    ASSERT_EQ(gcagent_submit(client_, it, keys, 3), GCAGENT_OK) << lastError();
    ASSERT_EQ(gcagent_wait(client_, it, keys, 3, 5000), GCAGENT_OK) << lastError();
    for (uint64_t key : keys) expectReduced(key, static_cast<float>(it * 100 + key));
    // Completed keys stay complete until submitted again.
    EXPECT_EQ(gcagent_poll(client_, it, keys, 3), GCAGENT_OK);
  }
  EXPECT_EQ(agent_->submits_seen.load(), 3);
}

TEST_F(ClientTest, DeviceOfferIsTakenWithItsDescriptorAndRefusedWithoutCuda) {
  if (hostHasGpu()) GTEST_SKIP() << "this host has a GPU: the offer would reach the mapping step";
  connect();
  agent_->on_device_declare = ScriptedAgent::OnDeviceDeclare::kOfferMemfd;
  const int before = openFds();
  EXPECT_EQ(declareDevice(1, 1000), GCAGENT_ERR_UNSUPPORTED);
  EXPECT_THAT(lastError(), ::testing::AnyOf(
                               "the agent offered GPU memory, but this process cannot use CUDA: no GPU: cannot load "
                               "libcuda.so.1: libcuda.so.1: cannot open shared object file: No such file or directory",
                               "the agent offered GPU memory, but this gcagent client library was built without CUDA"));
  // The scripted agent (a thread of this process) closes its own copy just after sending.
  ASSERT_TRUE(gcagent::testing::waitFor([&] { return agent_->memfd_offers_closed.load() >= 1; }));
  EXPECT_EQ(openFds(), before) << "the received descriptor must be closed";
  // Nothing is declared now, and the connection still works for host tensors.
  EXPECT_EQ(gcagent_device_buffer(client_, 1), 0u);
  EXPECT_EQ(lastError(), "key 1 is not declared on the device");
  ASSERT_EQ(declare({{1, 8}}), GCAGENT_OK) << lastError();
  fill(1, 2.0f);
  const uint64_t key = 1;
  ASSERT_EQ(gcagent_submit(client_, 1, &key, 1), GCAGENT_OK) << lastError();
  ASSERT_EQ(gcagent_wait(client_, 1, &key, 1, 2000), GCAGENT_OK) << lastError();
  expectReduced(1, 2.0f);
}

TEST_F(ClientTest, DeviceOfferWithoutItsDescriptorIsAProtocolError) {
  connect();
  agent_->on_device_declare = ScriptedAgent::OnDeviceDeclare::kOfferWithoutFd;
  EXPECT_EQ(declareDevice(1, 10), GCAGENT_ERR_PROTOCOL);
  EXPECT_EQ(lastError(), "the agent's device offer came without its file descriptor");
}

TEST_F(ClientTest, DeviceRefusalAndHostOnlyCallsAreNamed) {
  connect();
  EXPECT_EQ(declareDevice(1, 10), GCAGENT_ERR_AGENT);
  EXPECT_EQ(lastError(), "the agent rejected the declare device: failed_precondition: this agent has no GPU");
  const uint64_t key = 1;
  ASSERT_EQ(declare({{1, 8}}), GCAGENT_OK) << lastError();
  EXPECT_EQ(gcagent_submit_device(client_, 1, &key, 1, nullptr), GCAGENT_ERR_STATE);
  EXPECT_EQ(lastError(), "the tensors are declared on the host: submit them with gcagent_submit");
  EXPECT_EQ(gcagent_wait_device(client_, 1, &key, 1, 0, nullptr), GCAGENT_ERR_STATE);
  EXPECT_EQ(lastError(), "the tensors are not declared on the device: wait for them with gcagent_wait");
  EXPECT_EQ(gcagent_device_buffer(client_, 1), 0u);
  const gcagent_tensor t{1, 8, 0, nullptr, nullptr, nullptr, 0};
  EXPECT_EQ(gcagent_declare_device(client_, &t, 1, nullptr), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), "gcagent_declare_device: gpu_uuid is NULL");
  const uint8_t zeros[16] = {};
  EXPECT_EQ(gcagent_declare_device(client_, &t, 1, zeros), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), "control message 'declare device': gpu uuid is all zeros");
  EXPECT_EQ(gcagent_declare_device(nullptr, &t, 1, zeros), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(gcagent_status_string(GCAGENT_ERR_UNSUPPORTED),
               "not supported: needs CUDA, which this library's build or this host lacks");
}

TEST_F(ClientTest, SplitAndOutOfOrderCompletionsAreRemembered) {
  ASSERT_NO_FATAL_FAILURE(submitThreeKeysCompletedInReverse());
  const uint64_t first[] = {10}, rest[] = {11, 12};
  // The agent answers the second submit first, key 12 then 11, and then key 10: waiting for
  // key 10 reads all three completions.
  ASSERT_EQ(gcagent_wait(client_, 1, first, 1, 5000), GCAGENT_OK) << lastError();
  EXPECT_EQ(gcagent_poll(client_, 1, rest, 2), GCAGENT_OK) << lastError();
  for (uint64_t key : {10, 11, 12}) expectReduced(key, static_cast<float>(key));

  // Different iterations in flight at once, completed in the other order.
  const uint64_t a[] = {10}, b[] = {11};
  fill(10, 2.0f);
  fill(11, 3.0f);
  ASSERT_EQ(gcagent_submit(client_, 2, a, 1), GCAGENT_OK);
  ASSERT_EQ(gcagent_submit(client_, 3, b, 1), GCAGENT_OK);
  ASSERT_EQ(gcagent_wait(client_, 2, a, 1, 5000), GCAGENT_OK) << lastError();
  EXPECT_EQ(gcagent_poll(client_, 3, b, 1), GCAGENT_OK) << lastError();
  expectReduced(10, 2.0f);
  expectReduced(11, 3.0f);
}

// The agent's liveness: a wait that hears nothing pings it. An agent that answers keeps the
// wait going to its own timeout; a frozen one (it reads, never answers) is given up at the
// liveness timeout, well before the wait's, with an error that says so.
TEST_F(ClientTest, AWaitPingsAQuietAgentAndGivesUpAFrozenOne) {
  ::setenv("GCAGENT_CLIENT_LIVENESS_TIMEOUT", "1", 1);
  connect();
  ::unsetenv("GCAGENT_CLIENT_LIVENESS_TIMEOUT");
  ASSERT_EQ(declare({{1, 16}}), GCAGENT_OK) << lastError();
  agent_->on_submit = ScriptedAgent::OnSubmit::kSilent;
  const uint64_t keys[] = {1};
  ASSERT_EQ(gcagent_submit(client_, 5, keys, 1), GCAGENT_OK);
  // Pings after 0.5 s of quiet; the scripted agent has 0.5 s to answer each.
  EXPECT_EQ(gcagent_wait(client_, 5, keys, 1, 2500), GCAGENT_ERR_TIMEOUT) << lastError();
  EXPECT_GE(agent_->pings_seen.load(), 1) << "a quiet agent is asked";
  agent_->answer_pings = false;
  const auto start = Clock::now();
  EXPECT_EQ(gcagent_wait(client_, 5, keys, 1, 60000), GCAGENT_ERR_IO);
  EXPECT_LT(msSince(start), 30000) << "given up at the liveness timeout, not the wait's";
  EXPECT_THAT(lastError(), HasSubstr("the agent has not answered for 1 s: it is stopped or hung "
                                     "(GCAGENT_CLIENT_LIVENESS_TIMEOUT)"));
}

// A trainer that polls seldom (long compute between polls) is not given up on: the agent's
// answer to a ping waits unread in the socket and is read before the ping counts as unanswered.
TEST_F(ClientTest, APongWaitingUnreadKeepsASeldomPollingTrainerConnected) {
  ::setenv("GCAGENT_CLIENT_LIVENESS_TIMEOUT", "0.4", 1);
  connect();
  ::unsetenv("GCAGENT_CLIENT_LIVENESS_TIMEOUT");
  ASSERT_EQ(declare({{1, 16}}), GCAGENT_OK) << lastError();
  agent_->on_submit = ScriptedAgent::OnSubmit::kSilent;
  agent_->pong_delay_ms = 50;  // the answer comes after the poll that pinged returned
  const uint64_t keys[] = {1};
  ASSERT_EQ(gcagent_submit(client_, 5, keys, 1), GCAGENT_OK);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // quiet: the next poll pings
  EXPECT_EQ(gcagent_poll(client_, 5, keys, 1), GCAGENT_ERR_TIMEOUT) << lastError();
  ASSERT_TRUE(gcagent::testing::waitFor([&] { return agent_->pongs_sent.load() >= 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the ping is overdue; its pong unread
  EXPECT_EQ(gcagent_poll(client_, 5, keys, 1), GCAGENT_ERR_TIMEOUT) << lastError();
}

TEST_F(ClientTest, ABadLivenessTimeoutFailsTheConnectNamingTheVariable) {
  agent_->start();
  ::setenv("GCAGENT_CLIENT_LIVENESS_TIMEOUT", "soon", 1);
  EXPECT_EQ(gcagent_connect(agent_->socketPath().c_str(), "job", 0, 1, 2000, &client_), GCAGENT_ERR_INVALID_ARGUMENT);
  ::unsetenv("GCAGENT_CLIENT_LIVENESS_TIMEOUT");
  EXPECT_THAT(std::string(gcagent_last_error(nullptr)),
              HasSubstr("GCAGENT_CLIENT_LIVENESS_TIMEOUT: 'soon' is not a number of seconds"));
}

TEST_F(ClientTest, WaitTimesOutQuicklyAndKeysStayInFlight) {
  connect();
  ASSERT_EQ(declare({{1, 16}}), GCAGENT_OK) << lastError();
  agent_->on_submit = ScriptedAgent::OnSubmit::kSilent;
  const uint64_t keys[] = {1};
  ASSERT_EQ(gcagent_submit(client_, 5, keys, 1), GCAGENT_OK);
  const auto start = Clock::now();
  EXPECT_EQ(gcagent_wait(client_, 5, keys, 1, 100), GCAGENT_ERR_TIMEOUT);
  EXPECT_GE(msSince(start), 95);
  EXPECT_LT(msSince(start), 30000);  // returns at the timeout, not at some later event
  EXPECT_THAT(lastError(), HasSubstr("iteration 5 is not complete after 100 ms: 1 of 1 keys still pending (first: key 1)"));
  EXPECT_EQ(gcagent_poll(client_, 5, keys, 1), GCAGENT_ERR_TIMEOUT);
  EXPECT_EQ(gcagent_submit(client_, 6, keys, 1), GCAGENT_ERR_STATE);
  EXPECT_THAT(lastError(), HasSubstr("key 1 is still in flight from iteration 5"));
  EXPECT_EQ(declare({{2, 16}}), GCAGENT_ERR_STATE);
  EXPECT_THAT(lastError(), HasSubstr("1 submitted keys are still in flight"));
}

TEST_F(ClientTest, TimeoutInTheMiddleOfAFrameLosesNothing) {
  connect();
  ASSERT_EQ(declare({{1, 16}, {2, 16}}), GCAGENT_OK) << lastError();
  agent_->on_submit = ScriptedAgent::OnSubmit::kCompleteSlowly;
  const uint64_t keys[] = {1, 2};
  fill(1, 1.0f);
  fill(2, 2.0f);
  ASSERT_EQ(gcagent_submit(client_, 1, keys, 2), GCAGENT_OK);
  EXPECT_EQ(gcagent_wait(client_, 1, keys, 2, 100), GCAGENT_ERR_TIMEOUT);  // holds part of the frame
  agent_->release_rest = true;
  ASSERT_EQ(gcagent_wait(client_, 1, keys, 2, 5000), GCAGENT_OK) << lastError();
  expectReduced(1, 1.0f);
  expectReduced(2, 2.0f);
}

TEST_F(ClientTest, AgentErrorTextReachesLastError) {
  connect();
  ASSERT_EQ(declare({{10, 8}, {11, 8}, {12, 8}}), GCAGENT_OK) << lastError();
  agent_->fail_key = 11;
  const uint64_t all[] = {10, 11, 12}, good[] = {10, 12}, bad[] = {11};
  for (uint64_t key : all) fill(key, 1.0f);
  ASSERT_EQ(gcagent_submit(client_, 1, all, 3), GCAGENT_OK);
  ASSERT_EQ(gcagent_wait(client_, 1, good, 2, 5000), GCAGENT_OK) << lastError();
  EXPECT_EQ(gcagent_wait(client_, 1, bad, 1, 5000), GCAGENT_ERR_AGENT);
  EXPECT_EQ(lastError(), "key 11: the agent failed the submit of iteration 1: internal: codec exploded on key 11");
  EXPECT_EQ(gcagent_wait(client_, 1, all, 3, 5000), GCAGENT_ERR_AGENT);  // sticks until resubmitted
  expectReduced(10, 1.0f);

  agent_->fail_key = ScriptedAgent::kNoKey;
  fill(11, 4.0f);
  ASSERT_EQ(gcagent_submit(client_, 2, bad, 1), GCAGENT_OK) << lastError();
  ASSERT_EQ(gcagent_wait(client_, 2, bad, 1, 5000), GCAGENT_OK) << lastError();
  expectReduced(11, 4.0f);

  // A rejected declare keeps the old declaration.
  EXPECT_EQ(declare({{20, 8}}, "bogus"), GCAGENT_ERR_AGENT);
  EXPECT_EQ(lastError(), "the agent rejected the declare: not_found: unknown codec 'bogus'");
  EXPECT_NE(gcagent_buffer(client_, 10), nullptr);
  EXPECT_EQ(gcagent_buffer(client_, 20), nullptr);
}

TEST_F(ClientTest, RejectedHelloComesBackFromConnect) {
  agent_->start();
  gcagent_client* c = reinterpret_cast<gcagent_client*>(0x1);
  EXPECT_EQ(gcagent_connect(agent_->socketPath().c_str(), "rejected", 0, 1, 2000, &c), GCAGENT_ERR_AGENT);
  EXPECT_EQ(c, nullptr);
  EXPECT_THAT(std::string(gcagent_last_error(nullptr)), HasSubstr("the agent rejected the hello: not_found: job 'rejected' is not known here"));
}

TEST_F(ClientTest, JobErrorFailsTheConnection) {
  connect();
  ASSERT_EQ(declare({{1, 4}}), GCAGENT_OK) << lastError();
  agent_->on_submit = ScriptedAgent::OnSubmit::kJobError;
  const uint64_t keys[] = {1};
  ASSERT_EQ(gcagent_submit(client_, 1, keys, 1), GCAGENT_OK);
  EXPECT_EQ(gcagent_wait(client_, 1, keys, 1, 5000), GCAGENT_ERR_AGENT);
  EXPECT_EQ(lastError(), "the agent failed this trainer's job: unavailable: peer node 1 left the job");
  EXPECT_EQ(gcagent_submit(client_, 2, keys, 1), GCAGENT_ERR_AGENT);
}

TEST_F(ClientTest, AgentClosingMidWaitReturnsIo) {
  connect();
  ASSERT_EQ(declare({{1, 4}}), GCAGENT_OK) << lastError();
  agent_->on_submit = ScriptedAgent::OnSubmit::kClose;
  const uint64_t keys[] = {1};
  ASSERT_EQ(gcagent_submit(client_, 1, keys, 1), GCAGENT_OK);
  EXPECT_EQ(gcagent_wait(client_, 1, keys, 1, -1), GCAGENT_ERR_IO);
  EXPECT_THAT(lastError(), HasSubstr("closed the connection (did it exit?)"));
  EXPECT_THAT(lastError(), HasSubstr(agent_->socketPath()));
  // Every later call fails the same way, at once.
  EXPECT_EQ(gcagent_poll(client_, 1, keys, 1), GCAGENT_ERR_IO);
  EXPECT_EQ(gcagent_submit(client_, 2, keys, 1), GCAGENT_ERR_IO);
}

TEST_F(ClientTest, MalformedMessageIsAProtocolError) {
  connect();
  ASSERT_EQ(declare({{1, 4}}), GCAGENT_OK) << lastError();
  agent_->on_submit = ScriptedAgent::OnSubmit::kGarbage;
  const uint64_t keys[] = {1};
  ASSERT_EQ(gcagent_submit(client_, 1, keys, 1), GCAGENT_OK);
  EXPECT_EQ(gcagent_wait(client_, 1, keys, 1, 5000), GCAGENT_ERR_PROTOCOL);
  EXPECT_THAT(lastError(), HasSubstr("the agent sent a bad message: control header: bad magic"));
}

TEST_F(ClientTest, ConnectToMissingSocketTimesOut) {
  const std::string path = dir_ + "/nobody.sock";
  gcagent_client* c = nullptr;
  const auto start = Clock::now();
  EXPECT_EQ(gcagent_connect(path.c_str(), "job", 0, 1, 200, &c), GCAGENT_ERR_TIMEOUT);
  EXPECT_GE(msSince(start), 195);
  EXPECT_LT(msSince(start), 30000);  // returns at the timeout, not at some later event
  EXPECT_EQ(c, nullptr);
  const std::string error = gcagent_last_error(nullptr);
  EXPECT_THAT(error, HasSubstr("no gcagent agent answered at " + path));
  EXPECT_THAT(error, HasSubstr("No such file or directory"));
  EXPECT_THAT(error, HasSubstr("is the agent running"));
}

TEST_F(ClientTest, ConnectWaitsForAStartingAgent) {
  const auto start = Clock::now();  // before the starter's pause begins
  std::thread starter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    agent_->start();
  });
  const int rc = gcagent_connect(agent_->socketPath().c_str(), "job", 0, 1, 60000, &client_);
  starter.join();
  ASSERT_EQ(rc, GCAGENT_OK) << gcagent_last_error(nullptr);
  EXPECT_GE(msSince(start), 250);
  EXPECT_EQ(gcagent_node_count(client_), 2u);
}

TEST_F(ClientTest, ConnectWithoutWaitingNamesAMissingSocketAtOnce) {
  const std::string path = dir_ + "/nobody.sock";
  gcagent_client* c = nullptr;
  // A minute to wait, yet the answer is "no agent", not a timeout: nothing was waited for.
  EXPECT_EQ(gcagent_connect_flags(path.c_str(), "job", 0, 1, 60000, 0, &c), GCAGENT_ERR_IO);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(std::string(gcagent_last_error(nullptr)),
            "no gcagent agent at " + path + ": the socket does not exist; start the agent first, or check that "
            "this is its agent.socket");
  EXPECT_EQ(gcagent_connect_flags(path.c_str(), "job", 0, 1, 0, 2, &c), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(gcagent_last_error(nullptr)), HasSubstr("unknown flag bits 2"));
  // Once the agent listens, the same call connects.
  agent_->start();
  ASSERT_EQ(gcagent_connect_flags(agent_->socketPath().c_str(), "job", 0, 1, 2000, 0, &client_), GCAGENT_OK)
      << gcagent_last_error(nullptr);
}

TEST_F(ClientTest, ConnectFlagsWaitForAStartingAgentWhenAsked) {
  std::thread starter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    agent_->start();
  });
  const int rc = gcagent_connect_flags(agent_->socketPath().c_str(), "job", 0, 1, 60000,
                                       GCAGENT_CONNECT_WAIT_FOR_AGENT, &client_);
  starter.join();
  ASSERT_EQ(rc, GCAGENT_OK) << gcagent_last_error(nullptr);
  EXPECT_EQ(gcagent_node_count(client_), 2u);
}

TEST_F(ClientTest, BadArgumentsAreRejected) {
  EXPECT_EQ(gcagent_abi_version(), static_cast<uint32_t>(GCAGENT_CLIENT_ABI_VERSION));
  for (int code = GCAGENT_OK; code <= GCAGENT_ERR_INTERNAL; ++code)
    EXPECT_STRNE(gcagent_status_string(code), gcagent_status_string(-1)) << code;
  EXPECT_STREQ(gcagent_status_string(GCAGENT_ERR_TIMEOUT), "timed out");

  agent_->start();
  const char* path = agent_->socketPath().c_str();
  gcagent_client* c = nullptr;
  EXPECT_EQ(gcagent_connect(nullptr, "job", 0, 1, 0, &c), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(gcagent_last_error(nullptr)), HasSubstr("socket_path is NULL"));
  EXPECT_EQ(gcagent_connect(path, nullptr, 0, 1, 0, &c), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_connect(path, "job", 0, 1, 0, nullptr), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_connect(path, "", 0, 1, 0, &c), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(gcagent_last_error(nullptr)), HasSubstr("job name is empty"));
  EXPECT_EQ(gcagent_connect(path, "job", 2, 2, 0, &c), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(gcagent_last_error(nullptr)), HasSubstr("local rank 2 is not below the local size 2"));
  EXPECT_EQ(gcagent_connect(path, std::string(200, 'j').c_str(), 0, 1, 0, &c), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_connect(std::string(200, 'p').c_str(), "job", 0, 1, 0, &c), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(std::string(gcagent_last_error(nullptr)), HasSubstr("must hold 1 to 107 bytes"));
  EXPECT_EQ(c, nullptr);

  // Null clients.
  const uint64_t one[] = {1};
  EXPECT_EQ(gcagent_declare(nullptr, nullptr, 0), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_submit(nullptr, 1, one, 1), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_wait(nullptr, 1, one, 1, 0), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_buffer(nullptr, 1), nullptr);
  EXPECT_EQ(gcagent_buffer_elements(nullptr, 1), 0u);
  EXPECT_EQ(gcagent_trainer_id(nullptr), 0u);
  EXPECT_EQ(gcagent_set_reply_timeout(nullptr, 1), GCAGENT_ERR_INVALID_ARGUMENT);
  gcagent_close(nullptr);

  ASSERT_EQ(gcagent_connect(path, "job", 0, 1, 2000, &client_), GCAGENT_OK) << gcagent_last_error(nullptr);
  EXPECT_STREQ(gcagent_last_error(client_), "");
  EXPECT_EQ(gcagent_submit(client_, 1, one, 1), GCAGENT_ERR_STATE);
  EXPECT_THAT(lastError(), HasSubstr("declare before submitting"));

  EXPECT_EQ(gcagent_declare(client_, nullptr, 1), GCAGENT_ERR_INVALID_ARGUMENT);
  gcagent_tensor t{1, 0, 0, nullptr, nullptr, nullptr, 0};
  EXPECT_EQ(gcagent_declare(client_, &t, 0), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_declare(client_, &t, 1), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(lastError(), HasSubstr("tensor 0: element count 0 is outside [1, 2^40]"));
  gcagent_tensor two[] = {{1, 4, 0, nullptr, nullptr, nullptr, 0}, {1, 4, 0, nullptr, nullptr, nullptr, 0}};
  EXPECT_EQ(gcagent_declare(client_, two, 2), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(lastError(), HasSubstr("tensor 1: repeats key 1"));
  const std::string long_codec(40, 'c');
  t = {1, 4, 0, long_codec.c_str(), nullptr, nullptr, 0};
  EXPECT_EQ(gcagent_declare(client_, &t, 1), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(lastError(), HasSubstr("codec name of 40 bytes exceeds 32"));
  t = {1, 4, 0, nullptr, nullptr, nullptr, 1};
  EXPECT_EQ(gcagent_declare(client_, &t, 1), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(lastError(), HasSubstr("param_keys or param_values is NULL"));
  EXPECT_EQ(agent_->segmentName(), "");  // nothing invalid reached the agent

  ASSERT_EQ(declare({{1, 4}, {2, 4}}), GCAGENT_OK) << lastError();
  EXPECT_EQ(gcagent_buffer(client_, 999), nullptr);
  EXPECT_THAT(lastError(), HasSubstr("key 999 is not declared"));
  EXPECT_EQ(gcagent_buffer_elements(client_, 999), 0u);
  const uint64_t unknown[] = {1, 999}, dup[] = {2, 2};
  EXPECT_EQ(gcagent_submit(client_, 1, unknown, 2), GCAGENT_ERR_NOT_FOUND);
  EXPECT_EQ(gcagent_submit(client_, 1, dup, 2), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_THAT(lastError(), HasSubstr("key 2 is listed twice"));
  EXPECT_EQ(gcagent_submit(client_, 1, nullptr, 1), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_submit(client_, 1, one, 0), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_wait(client_, 1, nullptr, 1, 0), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_wait(client_, 1, one, 1, 0), GCAGENT_ERR_STATE);
  EXPECT_THAT(lastError(), HasSubstr("key 1 was never submitted"));
  const uint64_t unknown_first[] = {999, 1};
  EXPECT_EQ(gcagent_wait(client_, 1, unknown_first, 2, 0), GCAGENT_ERR_NOT_FOUND);
  ASSERT_EQ(gcagent_submit(client_, 1, one, 1), GCAGENT_OK);
  EXPECT_EQ(gcagent_wait(client_, 2, one, 1, 0), GCAGENT_ERR_STATE);
  EXPECT_THAT(lastError(), HasSubstr("key 1 was not submitted for iteration 2 (its last submit was for iteration 1)"));
  EXPECT_EQ(gcagent_wait(client_, 1, one, 1, 5000), GCAGENT_OK) << lastError();
  EXPECT_EQ(agent_->submits_seen.load(), 1);  // the rejected submits never reached the agent
}

TEST_F(ClientTest, RedeclareReplacesTheMapping) {
  connect();
  ASSERT_EQ(declare({{1, 100}, {2, 200}}), GCAGENT_OK) << lastError();
  const std::string first = agent_->segmentName();
  EXPECT_EQ(mappings(first), 2);
  const uint64_t keys[] = {1, 2};
  fill(1, 1.0f);
  fill(2, 2.0f);
  ASSERT_EQ(gcagent_submit(client_, 1, keys, 2), GCAGENT_OK);
  ASSERT_EQ(gcagent_wait(client_, 1, keys, 2, 5000), GCAGENT_OK) << lastError();

  ASSERT_EQ(declare({{3, 50}, {1, 1000}}), GCAGENT_OK) << lastError();
  const std::string second = agent_->segmentName();
  EXPECT_NE(second, first);
  EXPECT_EQ(mappings(first), 0) << "the client still maps the old segment";
  EXPECT_EQ(mappings(second), 2);
  EXPECT_EQ(gcagent_buffer(client_, 2), nullptr);
  EXPECT_EQ(gcagent_buffer_elements(client_, 1), 1000u);
  EXPECT_EQ(gcagent_buffer_elements(client_, 3), 50u);
  // Old submit state is gone with the old declaration.
  const uint64_t one[] = {1};
  EXPECT_EQ(gcagent_poll(client_, 1, one, 1), GCAGENT_ERR_STATE);

  const uint64_t now[] = {3, 1};
  fill(1, 5.0f);
  fill(3, 6.0f);
  ASSERT_EQ(gcagent_submit(client_, 2, now, 2), GCAGENT_OK);
  ASSERT_EQ(gcagent_wait(client_, 2, now, 2, 5000), GCAGENT_OK) << lastError();
  expectReduced(1, 5.0f);
  expectReduced(3, 6.0f);

  gcagent_close(client_);
  client_ = nullptr;
  EXPECT_EQ(mappings(second), 1) << "close left the client's mapping behind";
}

// gcagent_wait_any: one thread sleeps on a whole step's keys and takes each as it completes.
TEST_F(ClientTest, WaitAnyReturnsEachKeyAsItCompletes) {
  ASSERT_NO_FATAL_FAILURE(submitThreeKeysCompletedInReverse());
  std::vector<gcagent_step> steps = {{1, 10}, {1, 11}, {1, 12}};
  std::vector<uint64_t> order;
  while (!steps.empty()) {
    size_t index = 99;
    ASSERT_EQ(gcagent_wait_any(client_, steps.data(), steps.size(), 5000, -1, &index), GCAGENT_OK) << lastError();
    ASSERT_LT(index, steps.size());
    order.push_back(steps[index].key);
    steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(index));
  }
  EXPECT_THAT(order, ::testing::UnorderedElementsAre(10, 11, 12));
  for (uint64_t key : {10, 11, 12}) expectReduced(key, static_cast<float>(key));
}

TEST_F(ClientTest, WaitAnyWakesOnItsDescriptorTimesOutAndNamesAFailedKey) {
  connect();
  ASSERT_EQ(declare({{1, 16}, {2, 16}}), GCAGENT_OK) << lastError();
  agent_->on_submit = ScriptedAgent::OnSubmit::kSilent;
  const uint64_t keys[] = {1};
  ASSERT_EQ(gcagent_submit(client_, 5, keys, 1), GCAGENT_OK);
  const gcagent_step step{5, 1};
  size_t index = 0;
  EXPECT_EQ(gcagent_wait_any(client_, &step, 1, 50, -1, &index), GCAGENT_ERR_TIMEOUT);
  EXPECT_EQ(index, 1u);

  // No time limit: only the descriptor ends the wait, and the call leaves it unread.
  const int wake = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(wake, 0);
  std::thread waker([wake] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t one = 1;
    ASSERT_EQ(::write(wake, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  });
  EXPECT_EQ(gcagent_wait_any(client_, &step, 1, -1, wake, &index), GCAGENT_ERR_TIMEOUT) << lastError();
  waker.join();
  EXPECT_EQ(index, 1u);
  EXPECT_EQ(gcagent_wait_any(client_, &step, 1, -1, wake, &index), GCAGENT_ERR_TIMEOUT) << "still readable";
  ::close(wake);
  // A descriptor that is not open is refused, not watched forever.
  EXPECT_EQ(gcagent_wait_any(client_, &step, 1, -1, wake, &index), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), "wake_fd " + std::to_string(wake) + " is not an open descriptor");
  EXPECT_EQ(gcagent_wait_any(client_, &step, 1, 0, -1, &index), GCAGENT_ERR_TIMEOUT) << "the connection goes on";

  const gcagent_step never{5, 2};
  EXPECT_EQ(gcagent_wait_any(client_, &never, 1, 0, -1, &index), GCAGENT_ERR_STATE);
  EXPECT_EQ(lastError(), "key 2 was never submitted");
  EXPECT_EQ(gcagent_wait_any(client_, &step, 1, 0, -1, nullptr), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), "index is NULL");
  EXPECT_EQ(gcagent_wait_any(client_, nullptr, 0, 0, -1, &index), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lastError(), "no steps listed");
  EXPECT_EQ(gcagent_wait_any(nullptr, &step, 1, 0, -1, &index), GCAGENT_ERR_INVALID_ARGUMENT);
}

TEST_F(ClientTest, WaitAnyNamesTheKeyTheAgentFailed) {
  connect();
  ASSERT_EQ(declare({{10, 8}, {11, 8}}), GCAGENT_OK) << lastError();
  agent_->fail_key = 11;
  const uint64_t keys[] = {10, 11};
  ASSERT_EQ(gcagent_submit(client_, 1, keys, 2), GCAGENT_OK);
  // The agent completes key 10, then fails key 11: each call returns one of them, named.
  std::vector<gcagent_step> steps = {{1, 11}, {1, 10}};
  std::vector<std::pair<uint64_t, int>> outcomes;
  while (!steps.empty()) {
    size_t index = 9;
    const int rc = gcagent_wait_any(client_, steps.data(), steps.size(), 5000, -1, &index);
    ASSERT_LT(index, steps.size()) << lastError();
    if (rc == GCAGENT_ERR_AGENT) {
      EXPECT_THAT(lastError(), HasSubstr("key 11: "));
    }
    outcomes.emplace_back(steps[index].key, rc);
    steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(index));
  }
  EXPECT_THAT(outcomes, ::testing::UnorderedElementsAre(std::pair<uint64_t, int>{10, GCAGENT_OK},
                                                        std::pair<uint64_t, int>{11, GCAGENT_ERR_AGENT}));
}

// gcagent_buffer_fd: a mapping of the caller's own sees the slot the agent reduces into, and
// outlives the declaration and the client.
TEST_F(ClientTest, ASlotMappedThroughItsDescriptorOutlivesTheDeclarationAndTheClient) {
  connect();
  ASSERT_EQ(declare({{1, 100}, {2, 3000}}), GCAGENT_OK) << lastError();
  uint64_t first = 0, offset = 0;
  const int fd1 = gcagent_buffer_fd(client_, 1, &first);
  ASSERT_GE(fd1, 0) << lastError();
  ::close(fd1);
  const int fd = gcagent_buffer_fd(client_, 2, &offset);
  ASSERT_GE(fd, 0) << lastError();
  EXPECT_EQ(reinterpret_cast<std::byte*>(gcagent_buffer(client_, 2)) -
                reinterpret_cast<std::byte*>(gcagent_buffer(client_, 1)),
            static_cast<std::ptrdiff_t>(offset - first));
  const size_t bytes = offset + 3000 * sizeof(float);
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(base, MAP_FAILED);
  auto* mine = reinterpret_cast<float*>(static_cast<std::byte*>(base) + offset);
  for (int i = 0; i < 3000; ++i) mine[i] = static_cast<float>(i);
  EXPECT_EQ(gcagent_buffer(client_, 2)[2999], 2999.0f) << "the same memory as the library's slot";
  const uint64_t key = 2;
  ASSERT_EQ(gcagent_submit(client_, 1, &key, 1), GCAGENT_OK);
  ASSERT_EQ(gcagent_wait(client_, 1, &key, 1, 5000), GCAGENT_OK) << lastError();
  EXPECT_EQ(mine[7], 8.0f) << "the result lands where the caller's mapping sees it";

  ASSERT_EQ(declare({{3, 10}}), GCAGENT_OK) << lastError();
  gcagent_close(client_);
  client_ = nullptr;
  EXPECT_EQ(mine[2999], 3000.0f) << "the caller's mapping stays valid";
  ::munmap(base, bytes);
}

TEST_F(ClientTest, ABufferDescriptorIsRefusedForUnknownKeys) {
  connect();
  uint64_t offset = 0;
  EXPECT_EQ(gcagent_buffer_fd(client_, 1, &offset), -1);
  EXPECT_EQ(lastError(), "key 1 is not declared");
  ASSERT_EQ(declare({{1, 10}}), GCAGENT_OK) << lastError();
  EXPECT_EQ(gcagent_buffer_fd(client_, 1, nullptr), -1);
  EXPECT_EQ(lastError(), "offset is NULL");
  EXPECT_EQ(gcagent_buffer_fd(nullptr, 1, &offset), -1);
}

// Runs the C test trainer; returns its exit status and its stdout and stderr.
int runTrainer(const std::string& args, std::string* output) {
  const std::string command = std::string(GCAGENT_TEST_TRAINER) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return -1;
  char buf[4096];
  size_t n;
  output->clear();
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) output->append(buf, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(ClientTest, AStateGoesOutAndComesBackInPartsOfAtMostFourMebibytes) {
  connect();
  ASSERT_EQ(declare({{10, 64}}), GCAGENT_OK) << lastError();
  std::vector<uint8_t> blob(9u << 20);  // three parts: 4 + 4 + 1 MiB
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<uint8_t>(i * 7 + i / 4096);
  agent_->state_dropped = 2;
  uint32_t dropped = 0;
  ASSERT_EQ(gcagent_state_put(client_, 10, blob.data(), blob.size(), &dropped), GCAGENT_OK) << lastError();
  EXPECT_EQ(agent_->state_parts_seen.load(), 3);
  EXPECT_EQ(dropped, 2u);
  const auto kept = agent_->state(10);
  ASSERT_EQ(kept.size(), blob.size());
  EXPECT_EQ(std::memcmp(kept.data(), blob.data(), blob.size()), 0);
  uint8_t* back = nullptr;
  uint64_t bytes = 0;
  ASSERT_EQ(gcagent_state_get(client_, 10, &back, &bytes), GCAGENT_OK) << lastError();
  ASSERT_EQ(bytes, blob.size());
  EXPECT_EQ(std::memcmp(back, blob.data(), blob.size()), 0);
  gcagent_state_free(back);
  // An empty state is one empty part each way.
  ASSERT_EQ(gcagent_state_put(client_, 10, nullptr, 0, nullptr), GCAGENT_OK) << lastError();
  ASSERT_EQ(gcagent_state_get(client_, 10, &back, &bytes), GCAGENT_OK) << lastError();
  EXPECT_EQ(bytes, 0u);
  gcagent_state_free(back);
  EXPECT_EQ(gcagent_state_get(client_, 99, &back, &bytes), GCAGENT_ERR_NOT_FOUND);
  EXPECT_THAT(lastError(), HasSubstr("key 99 is not declared"));
  EXPECT_EQ(gcagent_state_put(client_, 10, nullptr, 5, nullptr), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_state_get(client_, 10, nullptr, &bytes), GCAGENT_ERR_INVALID_ARGUMENT);
}

TEST_F(ClientTest, TheJobsIterationIsAskedOfTheAgent) {
  connect();
  agent_->iteration_offset = 56;
  uint64_t job = 0;
  ASSERT_EQ(gcagent_job_iteration(client_, 1, &job), GCAGENT_OK) << lastError();
  EXPECT_EQ(job, 57u);
  EXPECT_EQ(gcagent_job_iteration(client_, 1, nullptr), GCAGENT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(gcagent_job_iteration(nullptr, 1, &job), GCAGENT_ERR_INVALID_ARGUMENT);
}

TEST_F(ClientTest, CTestTrainerChecksTheAverage) {
  agent_->start();
  agent_->add = 0.0f;  // one trainer: the average is its own gradient
  const std::string socket = "--socket " + agent_->socketPath() + " --timeout-ms 5000 ";
  std::string out;
  EXPECT_EQ(runTrainer(socket + "--tensors 1000,1,70000 --iterations 2 --codec none --param a=b --report", &out), 0)
      << out;
  EXPECT_THAT(out, HasSubstr("connected trainer_id=7 node_rank=1 node_count=2 tensors=3 bytes=284004\n"));
  EXPECT_THAT(out, HasSubstr("iteration=2 ms="));
  EXPECT_THAT(out, HasSubstr("summary iterations=2 bytes=284004 mean_ms="));

  const std::string model = dir_ + "/model.csv";
  std::ofstream(model) << "# a comment\nname,elements\nconv.weight,300\n\nconv.bias,3\n";
  EXPECT_EQ(runTrainer(socket + "--model " + model + " --iterations 1 --report", &out), 0) << out;
  EXPECT_THAT(out, HasSubstr("tensors=2 bytes=1212\n"));

  agent_->add = 1.0f;  // a wrong average
  EXPECT_EQ(runTrainer(socket + "--tensors 10 --iterations 1", &out), 1) << out;
  EXPECT_THAT(out, HasSubstr("mismatch at iteration 1 key 0 index 0: got "));
  EXPECT_THAT(out, HasSubstr("10 wrong values in iteration 1"));
  EXPECT_EQ(runTrainer(socket + "--tensors 10 --iterations 1 --check bound:1.5", &out), 0) << out;
  EXPECT_EQ(runTrainer(socket + "--tensors 10 --iterations 1 --check none", &out), 0) << out;

  EXPECT_EQ(runTrainer(socket + "--tensors 10 --codec bogus", &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("declare failed (the agent reported an error): the agent rejected the declare: "
                             "not_found: unknown codec 'bogus'"));
  EXPECT_EQ(runTrainer("--socket " + dir_ + "/none.sock --timeout-ms 50 --tensors 10", &out), 2) << out;
  EXPECT_THAT(out, HasSubstr("connect failed (timed out): no gcagent agent answered"));
  EXPECT_EQ(runTrainer(socket + "--tensors 10 --world-rank 2 --world-size 2", &out), 3) << out;
  EXPECT_EQ(runTrainer(socket + "--tensors 10,0", &out), 3) << out;
}

}  // namespace
}  // namespace gcagent::client::testing

// The trainers' side of the agent: a Unix stream socket speaking the control protocol
// (shm/protocol.h), one shared-memory segment per trainer, and the bookkeeping that turns
// the submissions of a job's local trainers into one reduction per key and iteration.
// Its parts: trainer_connection.h (a trainer's frames and deadlines), trainer_session.h
// (its requests and slots), local_job.h (a job's members, joining and counting) and
// device_staging.h (device slots copied in before a reduction on the host).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "agent/coding/device_path.h"
#include "agent/io.h"
#include "agent/control/job_registry.h"
#include "agent/control/local_job.h"
#include "agent/control/server_options.h"
#include "agent/control/session_host.h"
#include "agent/engine/reduction_engine.h"
#include "agent/control/trainer_connection.h"
#include "common/retry_delay.h"
#include "common/status.h"
#include "shm/protocol.h"

namespace gcagent::agent {

class TrainerSession;

struct ServerCounters {
  uint64_t trainers_connected = 0;
  uint64_t bad_messages = 0;
  uint64_t iterations_completed = 0;  // (job, iteration) pairs whose every key completed
  uint64_t device_refused = 0;        // device declarations this agent could not serve
  uint64_t connections_refused = 0;   // over max_connections
  uint64_t accept_errors = 0;         // failed accepts (each retried after a delay)
  uint64_t sessions_timed_out = 0;    // no hello, or a frame body that did not arrive in time
  uint64_t trainers_reconnected = 0;  // a trainer process's new connection in place of its old one
};

class ControlServer : public JobPart, private SessionHost {
 public:
  ControlServer(asio::io_context& io, ReductionEngine& engine, ServerOptions options);
  ~ControlServer();

  // Binds the socket (replacing a stale file) and starts accepting trainers.
  Status start();
  // Fails all work in flight with `why`, disconnects every trainer, removes the socket.
  void stop(const Status& why);

  // The engine's completion callback.
  void onReduced(uint64_t job, uint64_t iteration, uint64_t key, const Status& status,
                 std::optional<uint32_t> reload_root = std::nullopt);

  // A trainer of `job` on another node left after that node completed `last_completed`:
  // fails this node's work on later iterations of the job and refuses new submissions of
  // them, for as long as the job lives here.
  void onJobLost(uint64_t job, uint64_t last_completed, const Status& why);
  // The job's nodes changed (agent/membership/membership.h): every trainer hears the new node count,
  // and those that connect later hear it after their welcome.
  void onMembership(shm::protocol::Membership membership);

  const ServerCounters& counters() const { return counters_; }

  // JobPart: a job's trainers waiting on it are told why; a job gone retires its metrics.
  void failJob(uint64_t job, const Status& why) override;
  void dropJob(uint64_t job) override;

 private:
  // SessionHost: what its trainer sessions ask of it and tell it.
  const ServerOptions& options() const override { return options_; }
  const shm::protocol::Membership& membership() const override { return membership_; }
  JobRegistry& jobs() override { return jobs_; }
  DevicePath& devicePath() override { return *device_path_; }
  metrics::Stats& stats() override { return engine_.stats(); }
  void badMessage(const Status& why) override;
  void timedOut(uint32_t trainer, std::string_view what) override;
  void deviceRefused(const Status& why) override;
  void sessionClosed(TrainerSession* session) override;
  void replaceMember(const std::shared_ptr<LocalJob>& job, TrainerSession& old, TrainerSession& now) override;
  // Reduces on their GPU, on the host, or on the host after staging the device slots, as the
  // job placed the tensor (tensor_placement.h).
  void reduce(const std::shared_ptr<LocalJob>& job, uint64_t iteration, uint64_t key,
              std::vector<Contribution> ready) override;
  void notify(LocalJob& job, uint64_t iteration, uint64_t key, const Status& status,
              std::optional<uint32_t> reload_root = std::nullopt) override;
  void exportState(uint64_t job, uint64_t key, std::function<void(Result<std::vector<std::byte>>)> done) override {
    engine_.exportState(job, key, std::move(done));
  }
  Status importState(uint64_t job, uint64_t key, std::span<const std::byte> blob, uint32_t* dropped) override {
    return engine_.importState(job, key, blob, dropped);
  }
  uint64_t jobIteration(uint64_t job, uint64_t iteration) override { return engine_.alignmentOf(job).peek(iteration); }

  void accept();
  void acceptFailed(const boost::system::error_code& ec);
  // Fails every (iteration, key) of the job still waiting for local trainers with `why`.
  void failPending(LocalJob& job, const Status& why);

  asio::io_context& io_;
  ReductionEngine& engine_;
  ServerOptions options_;
  asio::local::stream_protocol::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  RetryDelay accept_delay_;
  bool refusing_ = false;  // over max_connections: logged once per streak
  std::shared_ptr<DevicePath> device_path_;
  std::map<TrainerSession*, std::shared_ptr<TrainerSession>> sessions_;
  // The last membership change the trainers heard (none: every node). The welcome keeps the
  // configured node count, which node ranks are below; this message follows it.
  shm::protocol::Membership membership_;
  JobRegistry jobs_;  // this server's trainers first, then the engine
  uint32_t next_trainer_id_ = 1;
  bool stopping_ = false;
  ServerCounters counters_;
};

}  // namespace gcagent::agent

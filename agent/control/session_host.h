// What a trainer session may ask of the server that accepted it, and what it tells it: the
// server's settings, the jobs, the device path, the metrics, and the events of a session's
// life (a bad message, a timeout, a refused device, its close, its place taken by the same
// process) and of its contributions (every local trainer's is in; an outcome to tell). The
// control server is the one implementation; a session reaches nothing else of it.
#pragma once

#include <cstdint>
#include <span>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "agent/coding/device_path.h"
#include "agent/control/job_registry.h"
#include "agent/control/local_job.h"
#include "agent/control/server_options.h"
#include "common/status.h"
#include "metrics/stats.h"
#include "shm/protocol.h"

namespace gcagent::agent {

class TrainerSession;

class SessionHost {
 public:
  virtual const ServerOptions& options() const = 0;
  // The last membership change the trainers heard (epoch 0: none since the start).
  virtual const shm::protocol::Membership& membership() const = 0;
  virtual JobRegistry& jobs() = 0;
  virtual DevicePath& devicePath() = 0;
  virtual metrics::Stats& stats() = 0;

  virtual void badMessage(const Status& why) = 0;
  virtual void timedOut(uint32_t trainer, std::string_view what) = 0;
  virtual void deviceRefused(const Status& why) = 0;
  virtual void sessionClosed(TrainerSession* session) = 0;
  // `now` is the same trainer process as `old`, connected again: it takes old's place in the
  // job (the job goes on, no peer hears of a leave), what old submitted is given up on every
  // node, and old is closed.
  virtual void replaceMember(const std::shared_ptr<LocalJob>& job, TrainerSession& old, TrainerSession& now) = 0;
  // Every local trainer's gradient of (iteration, key) is in: reduce it.
  virtual void reduce(const std::shared_ptr<LocalJob>& job, uint64_t iteration, uint64_t key,
                      std::vector<Contribution> ready) = 0;
  // Tells the job's trainers that submitted (iteration, key) how it ended.
  virtual void notify(LocalJob& job, uint64_t iteration, uint64_t key, const Status& status,
                      std::optional<uint32_t> reload_root = std::nullopt) = 0;
  // A tensor's error-feedback state for a checkpoint, out and back in
  // (ReductionEngine::exportState, importState).
  virtual void exportState(uint64_t job, uint64_t key, std::function<void(Result<std::vector<std::byte>>)> done) = 0;
  virtual Status importState(uint64_t job, uint64_t key, std::span<const std::byte> blob, uint32_t* dropped) = 0;
  // The job's iteration a trainer's `iteration` would be reduced as now (0: given up).
  virtual uint64_t jobIteration(uint64_t job, uint64_t iteration) = 0;

 protected:
  ~SessionHost() = default;
};

}  // namespace gcagent::agent

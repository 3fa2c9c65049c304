// What /healthz and /readyz report: the peers connected against those expected, whether
// trainers are being served, the trainers connected, the jobs that cannot make progress,
// and the last error with its time.
// The comm thread writes it, the HTTP thread reads it; one mutex, no hot path.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gcagent::metrics {

struct LastError {
  std::string kind;     // an errors_total kind: bad_message, timeout, peer_lost, reduction_failed
  std::string message;  // the error as it was decided
  std::chrono::system_clock::time_point when;
};

struct AwayNode {
  uint32_t rank = 0;
  double seconds = 0;      // since its link went down
  bool shut_down = false;  // it said goodbye
  std::string why;
};

struct HealthSnapshot {
  uint32_t rank = 0;
  uint32_t peers_connected = 0;
  uint32_t peers_expected = 0;
  bool serving = false;  // the control socket accepts trainers
  uint32_t trainers = 0;
  uint32_t stalled_jobs = 0;  // jobs that cannot make progress (ReductionEngine::stalledJobs)
  uint64_t errors = 0;  // errors recorded since start
  std::optional<LastError> last_error;
  // A member node away so long that its jobs cannot go on without it (the launcher ends the
  // job on it): its rank and why.
  std::optional<uint32_t> lost_node;
  std::string lost_why;
  // Member nodes whose links are down now (the launcher asks when its trainers are done).
  std::vector<AwayNode> away_nodes;

  // Ready: every peer is up, trainers are served and every job makes progress.
  bool ready() const { return serving && peers_connected == peers_expected && stalled_jobs == 0; }
};

class Health {
 public:
  void setRank(uint32_t rank, uint32_t peers_expected);
  void setPeersConnected(uint32_t n);
  void setServing(bool serving);
  void setTrainers(uint32_t n);
  void setStalledJobs(uint32_t n);
  void setLostNode(std::optional<uint32_t> rank, std::string why);
  void setAwayNodes(std::vector<AwayNode> away);
  void recordError(std::string_view kind, std::string_view message);

  HealthSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  HealthSnapshot state_;
};

// The JSON body of /healthz and /readyz; `now` makes the error's age testable.
std::string healthJson(const HealthSnapshot& s, std::chrono::system_clock::time_point now);

}  // namespace gcagent::metrics

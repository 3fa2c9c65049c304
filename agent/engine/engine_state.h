// The engine's per-job and per-tensor state: a declared tensor's route and this node's
// reduction of it in flight, and a job's tensors, iteration alignment and recent outcomes.
// The engine owns them; its parts (the gauges, the realignment) are handed them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/coding/local_coder.h"
#include "agent/engine/job_alignment.h"
#include "agent/engine/job_reload.h"
#include "agent/engine/tensor_route.h"
#include "common/clock.h"
#include "transport/transport.h"
#include "agent/coding/silent_codec_watch.h"

namespace gcagent::agent {

struct EngineCounters {
  uint64_t raw_bytes_sent = 0;   // fp32 bytes of the slices sent
  uint64_t wire_bytes_sent = 0;  // their encoded bytes
  uint64_t raw_bytes_received = 0;
  uint64_t wire_bytes_received = 0;
  uint64_t keys_completed = 0;
  uint64_t bad_messages = 0;
  uint64_t stale_slices = 0;  // of iterations given up (after a loss or a realignment), dropped
  uint64_t realignments = 0;  // times a job gave iterations up to continue with its peers
};

// A declared tensor: its route, and this node's reduction of it.
struct KeyState : TensorRoute {
  explicit KeyState(TensorRoute route) : TensorRoute(std::move(route)) {}
  SteadyTime started;
  // This node's reduction in flight.
  bool active = false;
  uint64_t iteration = 0;          // on the wire (job_alignment.h)
  uint64_t trainer_iteration = 0;  // as the trainers number it
  std::vector<float*> outputs;
  uint32_t slices_left = 0;
  uint32_t contributors = 0;
  bool completed_once = false;
  // Its results are all in while the job reconciles after a stall: it completes once the
  // peers say they did not give its iteration up (stall_reconcile.cc).
  bool ready = false;
  bool last_ok = false;  // the last iteration finished here completed (not failed)
  uint64_t last_iteration = 0;  // last iteration this node finished or failed, on the wire
  uint64_t last_trainer_iteration = 0;
  // The coder of the node's side (the host's, or a GPU's): it keeps this key's residuals.
  std::shared_ptr<LocalCoder> coder;
  KeyWork work;  // what the coder is told, while active
  // The node's residuals of a checkpoint (residual_state.h), put in force by its next
  // reduction, once the coder of its node side is known.
  std::optional<LocalCoder::SliceStates> restored;
  SilentCodecWatch silent;  // the push codec sending nothing but zeros
};

struct JobState {
  std::unordered_map<uint64_t, KeyState> keys;
  JobAlignment align;
  std::vector<uint64_t> announced;  // by rank: the frontier it last heard from here (job_realigner.h)
  std::vector<uint64_t> announced_reload;  // by rank: the reload it last heard called from here
  JobReload reload;  // the trainers' reload an iteration given up somewhere calls for
  // The iterations this node gave up lately (failed, or refused at once), newest last: what it
  // answers an agent back from a stall (agent/wire/outcome_query.h).
  std::deque<uint64_t> given_up;
  static constexpr size_t kGivenUpKept = 64;
  // After this node's agent did not run for longer than its peers wait, its steps in flight
  // then (wire iterations from..to) are decided by the peers' answers (stall_reconcile.cc):
  // they complete only if no member peer gave them up meanwhile.
  struct Reconcile {
    uint64_t from = 0, to = 0;
    std::vector<bool> waiting;  // by rank: asked, not answered yet
    std::optional<uint64_t> given_up_through;  // the newest iteration a peer gave up
    transport::Rank given_up_by = 0;
    std::optional<transport::Rank> job_gone_at;  // a peer that holds no such job
    SteadyTime deadline{};
  };
  std::optional<Reconcile> reconcile;
  // Since when every reduction failed, and the last failure.
  std::optional<SteadyTime> failing_since;
  SteadyTime last_failure{};

  void recordGivenUp(uint64_t iteration) {
    reload.call(iteration + 1);  // other nodes may have completed it (job_reload.h)
    if (!given_up.empty() && given_up.back() == iteration) return;
    given_up.push_back(iteration);
    if (given_up.size() > kGivenUpKept) given_up.pop_front();
  }
  // The newest iteration in [from, to] this node gave up: one it failed or refused, or one
  // below the job's floor (job_alignment.h) it never completed.
  std::optional<uint64_t> newestGivenUp(uint64_t from, uint64_t to) const {
    std::optional<uint64_t> newest;
    for (uint64_t i : given_up)
      if (i >= from && i <= to) newest = std::max(newest.value_or(0), i);
    std::optional<uint64_t> completed;  // the newest iteration any key completed here
    for (const auto& [key, k] : keys)
      if (k.completed_once && k.last_ok) completed = std::max(completed.value_or(0), k.last_iteration);
    if (align.floor() > from) {  // skipped up to the floor, unless completed there
      const uint64_t below = std::min(align.floor() - 1, to);
      if (!completed || below > *completed) newest = std::max(newest.value_or(0), below);
    }
    return newest;
  }
  // Whether `k`'s reduction in flight waits for the peers' answers after a stall.
  bool reconciles(const KeyState& k) const {
    return reconcile && k.active && k.iteration >= reconcile->from && k.iteration <= reconcile->to;
  }

  // A reduction of the job completed or failed.
  void recordOutcome(bool ok, SteadyTime now) {
    if (ok) {
      failing_since.reset();
      return;
    }
    last_failure = now;
    if (!failing_since) failing_since = now;
  }
  // Every reduction failed for a whole `window`, and the trainers still tried within it.
  bool stalled(SteadyTime now, SteadyClock::duration window) const {
    return failing_since && now - *failing_since >= window && now - last_failure < window;
  }
};

}  // namespace gcagent::agent

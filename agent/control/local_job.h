// A job as this node's trainers share it: its members by local rank, its declaration, and
// the bookkeeping that joins their submissions of an (iteration, key) into one reduction and
// counts an iteration's keys to its completion. Apart from the control server so that the
// joining and the counting, where a lost or doubled contribution would hang or skip an
// iteration, are tested on their own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/control/tensor_placement.h"
#include "agent/engine/tensor_route.h"
#include "common/log_throttle.h"
#include "common/status.h"
#include "shm/protocol.h"

namespace gcagent::agent {

class LocalCoder;
class TrainerSession;

// One local trainer's gradient of an (iteration, key), ready to reduce.
struct Contribution {
  float* host = nullptr;    // its shared-memory slot, or the host buffer a device slot stages to
  float* device = nullptr;  // its device slot; null for a host trainer
  std::shared_ptr<LocalCoder> coder;  // of the device slot's GPU; null: staged through the host
  std::weak_ptr<TrainerSession> session;
  std::shared_ptr<const void> pin;  // the memory of host: its segment, or its device slots' staging
  size_t index = 0;  // the slot, in the trainer's declaration
  uint64_t elements = 0;
};

// What one local trainer's submission did to the join of its key (LocalJob::contribute).
struct Joined {
  // Every local trainer's gradient, in rank order, once the last is in; nothing before.
  std::optional<std::vector<Contribution>> ready;
  // Another local trainer has moved past this iteration: it can never join.
  bool behind = false;
  // Earlier iterations of the key this submission moved past: they can never join either.
  std::vector<uint64_t> given_up;
};

struct LocalJob {
  std::string name;
  uint64_t id = 0;
  uint32_t local_size = 0;
  std::vector<TrainerSession*> members;  // by local rank
  std::vector<shm::protocol::TensorDecl> tensors;
  uint64_t generation = 0;
  // Submissions of an (iteration, key) so far, by local rank.
  std::map<std::pair<uint64_t, uint64_t>, std::vector<Contribution>> pending;
  // Each local trainer's slots, by local rank, once it declared them.
  std::vector<std::optional<MemberSlots>> slots;
  // Of each declared tensor, what its route says (ReductionEngine::declareJob).
  std::unordered_map<uint64_t, DeclaredTensor> routes;
  // Where each declared tensor reduces here, decided once every local trainer declared.
  std::unordered_map<uint64_t, TensorPlacement> placements;
  std::map<uint64_t, size_t> keys_done;  // iteration -> keys completed
  // Keys reduced per iteration, learned from the last iteration the trainers moved past: a job
  // may declare more tensors than it reduces each step (a broadcast's, frozen layers'). 0:
  // not learned yet (every declared tensor counts).
  std::map<uint64_t, size_t> keys_started;  // iteration -> reductions started
  size_t keys_per_iteration = 0;
  size_t inFlight = 0;                   // reductions handed to the engine, not yet done
  uint64_t last_completed = 0;           // the last iteration whose every key completed
  // Set once a trainer of the job left, here or on another node: iterations after
  // lost_after can never complete.
  Status lost;
  uint64_t lost_after = 0;
  LogThrottle failure_log;  // failed reductions: a line a second at most

  // Local rank `local_rank`'s gradient of (iteration, key) is in: every local trainer's, in
  // rank order, once the last is (and the entry is gone from pending), or at once for a
  // tensor that one trainer contributes (reduce.contributor); nothing before. Local
  // trainers drift apart when each fails steps on its own (while a peer is away) and meet
  // again here: the one behind fails at once until it reaches the one ahead.
  Joined contribute(uint32_t local_rank, uint64_t iteration, uint64_t key, Contribution mine);
  // One key of `iteration` completed: true when that made every declared key of it complete
  // (last_completed then counts it).
  bool keyCompleted(uint64_t iteration);
  // A reduction of `iteration` started; one of a later iteration fixes how many keys the
  // iterations before it had.
  void reductionStarted(uint64_t iteration);
  // Iterations after `last_completed` can never complete, for `why`; the first reason stays.
  void loseAfter(uint64_t last_completed, const Status& why);
  // No local trainer is connected.
  bool deserted() const;
  // Whether `local_rank` may submit `key`: every local trainer may, unless one alone
  // contributes it (reduce.contributor). The error names both ranks.
  Status checkContributor(uint32_t local_rank, uint64_t key) const;
  // The engine took the job's tensors (their routes, in declaration order).
  void routesDeclared(const std::vector<DeclaredTensor>& declared);
  // Local rank `local_rank` declared `mine`: once every local trainer has, every tensor's
  // placement is decided again. Refused while a reduction is in flight if that would move a
  // tensor (its result would be looked for in the wrong place); checked before anything else
  // of the declaration is done, so a refused one changes nothing.
  Status checkSlots(uint32_t local_rank, const MemberSlots& mine) const;
  void declareSlots(uint32_t local_rank, MemberSlots mine);
  // Where `key` reduces here: decided when every local trainer declared (on the host before).
  const TensorPlacement& placementOf(uint64_t key) const;
};

using LocalJobs = std::unordered_map<uint64_t, std::shared_ptr<LocalJob>>;

// The job `name` (by jobIdOf), made for `local_size` trainers when it is new; null, with
// `error` set, when another job has its id or the job has another local size.
std::shared_ptr<LocalJob> findOrCreateJob(LocalJobs& jobs, const std::string& name, uint32_t local_size,
                                          Status* error);

}  // namespace gcagent::agent

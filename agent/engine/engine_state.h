// The engine's per-job and per-tensor state: a declared tensor's route and this node's
// reduction of it in flight, and a job's tensors, iteration alignment and recent outcomes.
// The engine owns them; its parts (the gauges, the realignment) are handed them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "agent/coding/local_coder.h"
#include "agent/engine/job_alignment.h"
#include "agent/engine/tensor_route.h"
#include "common/clock.h"
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
  // Since when every reduction failed, and the last failure.
  std::optional<SteadyTime> failing_since;
  SteadyTime last_failure{};

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

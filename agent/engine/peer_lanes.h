// The P3 sending side: one lane per peer (scheduler/send_lane.h: a priority queue plus a
// credit window), and the hand-over of the slices the windows admit to the transport. Each
// send pins its bytes until the transport is done with them; completions give the credit
// back, time the link for the planner and let the next slices go. A contribution whose
// reduction failed while it waited is dropped instead of sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "agent/wire/slice_message.h"
#include "common/clock.h"
#include "metrics/stats.h"
#include "scheduler/planner.h"
#include "transport/transport.h"

namespace gcagent::agent {

// Bytes handed to the transport and what keeps them alive until it is done with them: an
// encoding, or for an uncompressed slice the memory it lives in (a trainer's segment, an
// owner's sum), sent without a copy.
struct Payload {
  std::shared_ptr<const void> pin;
  std::span<const std::byte> bytes;
};

// A slice waiting for its peer's credit window: its header and its bytes, pinned. A result
// was encoded once by the owner and is shared by the sends to every node.
struct Outgoing {
  SliceKind kind;
  uint64_t job, key, iteration;
  uint32_t slice;
  std::vector<std::byte> header;
  Payload payload;
};

class PeerLanes {
 public:
  // Whether a queued contribution's reduction still wants it sent.
  using Wanted = std::function<bool(const Outgoing&)>;
  // A hand-over the transport refused: the slice's reduction fails with `why`.
  using Refused = std::function<void(const Outgoing&, const Status& why)>;

  PeerLanes(transport::Transport& transport, uint32_t inflight_slices, uint64_t inflight_bytes,
            std::shared_ptr<metrics::Stats> stats, scheduler::Planner& planner, SteadyNow now, Wanted wanted,
            Refused refused);
  ~PeerLanes();

  // Queues `item` for `to` at `priority`; send() hands over what the window admits.
  void push(transport::Rank to, int32_t priority, Outgoing item);
  void send(transport::Rank to);
  size_t queued(transport::Rank peer) const;

 private:
  struct Lane;
  void onSent(transport::Rank to, uint64_t bytes, SteadyTime handed, const Status& s);

  transport::Transport& transport_;
  std::shared_ptr<metrics::Stats> stats_;
  scheduler::Planner& planner_;
  SteadyNow now_;
  Wanted wanted_;
  Refused refused_;
  std::vector<std::unique_ptr<Lane>> lanes_;     // by rank; none for this one
  std::vector<metrics::PeerStats*> peer_stats_;  // by rank, fetched once
  // Send completions may run after the lanes are gone; they reach them through this.
  std::shared_ptr<PeerLanes*> alive_;
};

}  // namespace gcagent::agent

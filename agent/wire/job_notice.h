// A notice one agent sends every peer when a job can no longer complete its iteration on
// its node (a trainer of the job left or was killed), so the peers fail that job's
// reductions at once instead of waiting for contributions that will never come. A peer
// frame (agent/wire/peer_frame.h) of the fields frameFields lists. The sender's node completed every iteration up to `last_completed` (its contributions and
// results for them are all sent), so a receiver fails only the later ones.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace gcagent::agent {

struct JobNotice {
  uint64_t job = 0;
  uint64_t last_completed = 0;  // the job's last iteration the sender's node completed, on the wire
  std::string reason;  // why the job failed on the sender's node
  bool operator==(const JobNotice&) const = default;
};

inline constexpr size_t kMaxNoticeReason = 512;

// Its fields in wire order (agent/wire/peer_frame.h); a longer reason is cut to kMaxNoticeReason.
template <class M, class F>
  requires std::same_as<std::remove_const_t<M>, JobNotice>
void frameFields(M& m, F& f) {
  f.num(m.job);
  f.num(m.last_completed);
  f.text(m.reason, kMaxNoticeReason);
}

// A node's frontier for a job (job_alignment.h): it gives up every iteration below `next`
// and completes nothing earlier. Sent when a link comes up, when the node gives an
// iteration up, and in answer to a slice of an iteration it gave up. `reload_from`, when not
// 0: an iteration was given up on some node, which others may have completed (their models
// then differ), so the job's trainers reload one node's weights after the first iteration
// from there that completes (engine_state.h, JobState::reload).
struct RealignNotice {
  uint64_t job = 0;
  uint64_t next = 0;
  uint64_t reload_from = 0;
  bool operator==(const RealignNotice&) const = default;
};

template <class M, class F>
  requires std::same_as<std::remove_const_t<M>, RealignNotice>
void frameFields(M& m, F& f) {
  f.num(m.job);
  f.num(m.next);
  f.num(m.reload_from);
}

}  // namespace gcagent::agent

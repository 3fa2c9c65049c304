// ReductionEngine's recovery: lost and returning peers, deadlines, realignment of a job's
// iterations (job_alignment.h) and what a new membership view does to the jobs
// (membership_node.h agrees on it).
#include <algorithm>
#include <optional>

#include "agent/engine/engine_state.h"
#include "agent/wire/peer_frame.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::agent {

void ReductionEngine::onPeerDown(transport::Rank peer, const Status& why, bool shut_down) {
  const Status status = Status::unavailable(strCat("peer rank ", peer, " lost: ", why.message()));
  membership_.peerDown(peer, why.message(), shut_down);
  stats_->recordError(why.code() == StatusCode::kDeadlineExceeded ? metrics::ErrorKind::kTimeout
                                                                  : metrics::ErrorKind::kPeerLost,
                      status.message());
  if (!membership_.isMember(peer)) return;  // left behind already: nothing here needs it
  for (auto& [job, js] : jobs_) failJob(job, status);
}

void ReductionEngine::onPeerUp(transport::Rank peer) {
  membership_.peerUp(peer);  // it hears the view before any slice under it
  for (auto& [job, js] : jobs_) {
    js->announced[peer] = 0;  // a restarted peer knows nothing
    announce(job, *js, peer);
  }
}

void ReductionEngine::failJob(uint64_t job, const Status& why) {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return;
  for (auto& [key, k] : j->second->keys) {
    completeKey(job, k, why);
    // Partial sums that can no longer complete; those of later iterations, which peers
    // ahead already sent, stay for when this node gets there.
    if (k.completed_once) owner_->dropSums(job, key, k.last_iteration);
  }
}

void ReductionEngine::giveUp(uint64_t job, const Status& why) {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return;
  std::optional<uint64_t> newest;
  for (const auto& [key, k] : j->second->keys)
    if (k.active) newest = std::max(newest.value_or(0), k.iteration);
  if (!newest) return;
  realign(job, *j->second, *newest + 1, why.message());
  for (transport::Rank r = 0; r < transport_.size(); ++r)
    if (r != transport_.rank()) announce(job, *j->second, r);
}

uint64_t ReductionEngine::frontierOf(const JobState& js) const {
  std::optional<uint64_t> active;
  uint64_t after = js.align.floor();
  for (const auto& [key, k] : js.keys) {
    if (k.active) active = std::min(active.value_or(UINT64_MAX), k.iteration);
    if (k.completed_once) after = std::max(after, k.last_iteration + 1);
  }
  return active.value_or(after);
}

void ReductionEngine::announce(uint64_t job, JobState& js, transport::Rank to) {
  const uint64_t next = frontierOf(js);
  if (next == 0 || next <= js.announced[to] || !transport_.peerUp(to)) return;
  js.announced[to] = next;
  (void)transport_.send(to, encodePeerFrame(RealignNotice{job, next}), {}, nullptr);
}

void ReductionEngine::realign(uint64_t job, JobState& js, uint64_t next, const std::string& why) {
  const uint64_t offset = js.align.offset();
  if (!js.align.adopt(next)) return;
  // A node ahead of `next` gives nothing up; one behind fails what it has in flight below it.
  bool gave_up = js.align.offset() != offset;
  const Status given_up = Status::unavailable(strCat("iteration given up to realign with the other nodes: ", why));
  for (auto& [key, k] : js.keys) {
    if (k.active && k.iteration < next) {
      completeKey(job, k, given_up);
      gave_up = true;
    }
    owner_->dropSums(job, key, next - 1);
  }
  if (!gave_up) return;
  ++counters_.realignments;
  stats_->recovery(metrics::Stats::kRealigned).Increment();
  GC_LOG(kInfo, "agent", "job ", job, ": realigned: iterations below ", next, " given up (", why,
         "); this node's trainers go on from their iteration ", next - js.align.offset());
}

void ReductionEngine::onRealign(const transport::Message& m, const RealignNotice& notice) {
  auto j = jobs_.find(notice.job);
  if (j == jobs_.end()) {  // the job is not declared here yet: its first step starts there
    auto& early = early_realign_[notice.job];
    early = std::max(early, notice.next);
    return;
  }
  realign(notice.job, *j->second, notice.next, strCat("rank ", m.from, " goes on at iteration ", notice.next));
}

void ReductionEngine::staleSlice(const transport::Message& m, const SliceMessage& h, JobState& js) {
  ++counters_.stale_slices;
  stats_->staleSlices(/*results=*/false).Increment();
  GC_LOG(kDebug, "agent", "rank ", m.from, ": contribution for tensor ", h.key, " iteration ", h.iteration,
         " dropped: given up here");
  announce(h.job, js, m.from);
}

void ReductionEngine::expireReductions() {
  releaseDepartedShares();
  if (options_.reduction_timeout <= 0) return;
  const SteadyTime now = options_.now();
  const auto timeout = steadySeconds(options_.reduction_timeout);
  for (auto& [job, js] : jobs_) {
    std::optional<uint64_t> expired;
    for (auto& [key, k] : js->keys)
      if (k.active && now - k.started > timeout) expired = std::max(expired.value_or(0), k.iteration);
    if (!expired) continue;
    stats_->recovery(metrics::Stats::kReductionTimeout).Increment();
    const std::string why = strCat("not reduced within ", options_.reduction_timeout, " s (transport.reduction_timeout)");
    stats_->recordError(metrics::ErrorKind::kTimeout, strCat("job ", job, " iteration ", *expired, ": ", why));
    realign(job, *js, *expired + 1, why);
    for (transport::Rank r = 0; r < transport_.size(); ++r)
      if (r != transport_.rank()) announce(job, *js, r);
  }
}

void ReductionEngine::releaseDepartedShares() {
  // The lanes ask about a share only while they queue it: once they are empty, none is owed.
  if (departed_shares_.empty()) return;
  for (transport::Rank r = 0; r < transport_.size(); ++r)
    if (lanes_->queued(r) > 0) return;
  departed_shares_.clear();
}

void ReductionEngine::recordOutcome(JobState& js, bool ok) {
  if (ok) {
    js.failing_since.reset();
    return;
  }
  js.last_failure = options_.now();
  if (!js.failing_since) js.failing_since = js.last_failure;
}

size_t ReductionEngine::stalledJobs() const {
  if (options_.reduction_timeout <= 0) return 0;
  const SteadyTime now = options_.now();
  const auto window = steadySeconds(options_.reduction_timeout);
  size_t stalled = 0;
  for (const auto& [job, js] : jobs_)
    if (js->failing_since && now - *js->failing_since >= window && now - js->last_failure < window) ++stalled;
  return stalled;
}


void ReductionEngine::onViewInstalled(const MembershipView& before, const MembershipView& view) {
  const transport::Rank self = transport_.rank();
  const auto owner_before = [&](uint64_t key, uint32_t s) {
    return before.members[scheduler::ownerOf(key, s, static_cast<uint32_t>(before.members.size()))];
  };
  // What is in flight was sliced for the old owners: it fails everywhere, and every job
  // then goes on from its nodes' frontier (job_alignment.h).
  const Status changed = Status::unavailable(strCat("the job's nodes changed to ", view.describe(),
                                                    ": this iteration is given up; the next runs on ",
                                                    view.members.size(), " nodes"));
  for (auto& [job, js] : jobs_) failJob(job, changed);
  owner_->setMembers(view.members);
  // Result residuals of the slices owned here until now that moved away go, and those of
  // every slice whose hop may move (TopologyTraits): the new owner starts from zero, and those
  // of a departed node went with it (DESIGN.md, "Recovery").
  if (before.contains(self))
    for (const auto& [job, js] : jobs_)
      for (const auto& [key, k] : js->keys) {
        const bool hops = traitsOf(k.topology).hops;
        for (uint32_t s = 0; s < k.slice_count; ++s)
          if (hops || (owner_before(key, s) == self && (!view.contains(self) || ownerOf(key, s) != self)))
            owner_->forgetResidual(job, key, s);
      }
  for (auto& [job, js] : jobs_)
    for (transport::Rank r = 0; r < transport_.size(); ++r)
      if (r != self) announce(job, *js, r);
  if (options_.on_membership) options_.on_membership(view);
}

}  // namespace gcagent::agent

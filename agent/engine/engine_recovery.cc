// ReductionEngine's recovery: lost and returning peers, deadlines, and what a new membership
// view does to the jobs (membership_node.h agrees on it, job_realigner.h realigns them).
#include <algorithm>
#include <optional>

#include "agent/engine/reduction_engine.h"

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
    realigner_->peerUp(job, *js, peer);  // a restarted peer knows nothing
    if (js->reconcile && peer < js->reconcile->waiting.size() && js->reconcile->waiting[peer])
      askOutcome(job, *js, peer);  // its link broke while this agent was away
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
  if (auto j = jobs_.find(job); j != jobs_.end()) realigner_->giveUpInFlight(job, *j->second, why.message());
}

void ReductionEngine::expireReductions() {
  // The lanes ask about a departed job's share only while they queue it: once they are
  // empty, none is owed.
  bool queued = false;
  for (transport::Rank r = 0; r < transport_.size(); ++r) queued |= lanes_->queued(r) > 0;
  if (!queued) departed_shares_.clear();
  const SteadyTime now = options_.now();
  for (auto& [job, js] : jobs_) {
    if (!js->reconcile || now <= js->reconcile->deadline) continue;
    std::string silent;
    for (transport::Rank r = 0; r < js->reconcile->waiting.size(); ++r)
      if (js->reconcile->waiting[r]) silent += strCat(silent.empty() ? "" : ", ", r);
    endReconcile(job, *js, Status::deadlineExceeded(strCat("after this agent's stall, rank(s) ", silent,
                                                           " did not say in time whether they gave the step up")));
  }
  if (options_.reduction_timeout <= 0) return;
  const auto timeout = steadySeconds(options_.reduction_timeout);
  for (auto& [job, js] : jobs_) {
    std::optional<uint64_t> expired;
    for (auto& [key, k] : js->keys)  // those held after a stall wait for the peers' answers
      if (k.active && !js->reconciles(k) && now - k.started > timeout) expired = std::max(expired.value_or(0), k.iteration);
    if (!expired) continue;
    stats_->recovery(metrics::Stats::kReductionTimeout).Increment();
    const std::string why = strCat("not reduced within ", options_.reduction_timeout, " s (transport.reduction_timeout)");
    stats_->recordError(metrics::ErrorKind::kTimeout, strCat("job ", job, " iteration ", *expired, ": ", why));
    realigner_->realign(job, *js, *expired + 1, why);
    realigner_->announceToAll(job, *js);
  }
}

size_t ReductionEngine::tick() {
  expireReductions();
  membership_.review();
  gauges_.refresh(jobs_, *owner_, *lanes_);
  if (options_.reduction_timeout <= 0) return 0;
  const SteadyTime now = options_.now();
  const auto window = steadySeconds(options_.reduction_timeout);
  return static_cast<size_t>(
      std::count_if(jobs_.begin(), jobs_.end(), [&](const auto& entry) { return entry.second->stalled(now, window); }));
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
  for (auto& [job, js] : jobs_) {
    js->reconcile.reset();  // held after a stall or not, it was sliced for the old owners
    failJob(job, changed);
  }
  owner_->setMembers(view.members);
  // Result residuals of the slices owned here until now that moved away go, and those of
  // every slice whose hop may move (TopologyTraits): the new owner starts from zero, and those
  // of a departed node went with it (DESIGN.md, "Recovery").
  if (before.contains(self))
    for (const auto& [job, js] : jobs_)
      for (const auto& [key, k] : js->keys) {
        const bool hops = traitsOf(k.topology).hops;
        for (uint32_t s = 0; s < k.slice_count; ++s)
          if (hops || (owner_before(key, s) == self && (!view.contains(self) || membership_.ownerOf(key, s) != self)))
            owner_->forgetResidual(job, key, s);
      }
  for (auto& [job, js] : jobs_) realigner_->announceToAll(job, *js);
  if (options_.on_membership) options_.on_membership(view);
}

}  // namespace gcagent::agent

// ReductionEngine after a stall of its own agent: a stopped or starved process that did not
// run for longer than transport.peer_timeout. Its peers may have called it lost meanwhile and
// failed the steps it had in flight; the results they had sent before wait in its queues and
// would complete those steps here alone, a step done on one node and failed on another. So
// the steps in flight at its return, and those that start before the peers answer (a trainer
// may have submitted during the stop), are held: each completes once every member peer
// answers that it did not give that iteration up, and fails when one did (or none answers
// in time).
#include <algorithm>
#include <optional>

#include "agent/engine/reduction_engine.h"

#include "agent/engine/engine_state.h"
#include "agent/wire/peer_frame.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::agent {

void ReductionEngine::onStalled(double seconds) {
  stats_->recovery(metrics::Stats::kStalled).Increment();
  const double answer_within = options_.reduction_timeout > 0 ? options_.reduction_timeout : 30;
  const transport::Rank self = transport_.rank();
  size_t held = 0;
  for (auto& [job, js] : jobs_) {
    // From the job's frontier on, with no end: a step its trainers submitted while the agent
    // was stopped starts only now, and may complete on what waited in the queues.
    const uint64_t from = JobRealigner::frontierOf(*js);
    const bool again = js->reconcile.has_value();  // a second stall before the answers came
    JobState::Reconcile& rc = again ? *js->reconcile : js->reconcile.emplace();
    rc.from = again ? std::min(rc.from, from) : from;
    rc.to = UINT64_MAX;
    rc.waiting.assign(transport_.size(), false);
    for (transport::Rank r : membership_.view().members)
      if (r != self) rc.waiting[r] = true;
    rc.deadline = options_.now() + steadySeconds(answer_within);
    if (std::none_of(rc.waiting.begin(), rc.waiting.end(), [](bool w) { return w; })) {
      js->reconcile.reset();  // no peer to ask
      continue;
    }
    ++held;
    for (transport::Rank r = 0; r < transport_.size(); ++r)
      if (rc.waiting[r]) askOutcome(job, *js, r);
  }
  GC_LOG(kWarn, "agent", "this agent did not run for ", seconds,
         " s, longer than its peers wait (transport.peer_timeout): they may have given up its steps in flight "
         "meanwhile; ", held == 0 ? "it has no job" : strCat(held, " job(s) hold the steps that complete until every "
                                                               "peer says whether it gave them up"));
}

void ReductionEngine::askOutcome(uint64_t job, const JobState& js, transport::Rank peer) {
  if (!js.reconcile || !transport_.peerUp(peer)) return;  // asked again when its link is up
  (void)transport_.send(peer, encodePeerFrame(OutcomeQuery{job, js.reconcile->from, js.reconcile->to}), {}, nullptr);
}

void ReductionEngine::answerOutcome(transport::Rank from, const OutcomeQuery& query) {
  OutcomeAnswer answer{query.job, query.from, query.to};
  auto j = jobs_.find(query.job);
  if (j == jobs_.end()) {
    answer.job_unknown = 1;  // its trainers left (the notice was lost with the link), or never came
  } else if (auto newest = j->second->newestGivenUp(query.from, query.to)) {
    answer.gave_up = 1;
    answer.newest_given_up = *newest;
  }
  GC_LOG(kInfo, "agent", "rank ", from, " was away and asks about job ", query.job, " iterations from ", query.from,
         ": ", answer.job_unknown ? "no such job here"
               : answer.gave_up   ? strCat("given up here through ", answer.newest_given_up)
                                  : "none given up here");
  (void)transport_.send(from, encodePeerFrame(answer), {}, nullptr);
}

void ReductionEngine::onOutcomeAnswer(transport::Rank from, const OutcomeAnswer& answer) {
  auto j = jobs_.find(answer.job);
  if (j == jobs_.end() || !j->second->reconcile) return;  // decided already
  JobState::Reconcile& rc = *j->second->reconcile;
  if (from >= rc.waiting.size() || !rc.waiting[from]) return;
  rc.waiting[from] = false;
  if (answer.job_unknown) rc.job_gone_at = from;
  if (answer.gave_up && answer.newest_given_up >= rc.given_up_through.value_or(0)) {
    rc.given_up_through = answer.newest_given_up;
    rc.given_up_by = from;
  }
  if (std::none_of(rc.waiting.begin(), rc.waiting.end(), [](bool w) { return w; }))
    endReconcile(answer.job, *j->second, std::nullopt);
}

void ReductionEngine::endReconcile(uint64_t job, JobState& js, const std::optional<Status>& no_answer) {
  const JobState::Reconcile rc = std::move(*js.reconcile);
  std::vector<KeyState*> held;
  for (auto& [key, k] : js.keys)
    if (k.active && k.iteration >= rc.from && k.iteration <= rc.to) held.push_back(&k);
  js.reconcile.reset();  // completeKey decides them from here
  size_t completed = 0, failed = 0;
  for (KeyState* k : held) {
    const bool ready = std::exchange(k->ready, false);
    if (no_answer) {
      completeKey(job, *k, *no_answer);
    } else if (rc.job_gone_at) {
      completeKey(job, *k, Status::unavailable(strCat("rank ", *rc.job_gone_at, " has no job ", job,
                                                      " any more: its trainers left while this agent was stalled")));
    } else if (rc.given_up_through && k->iteration <= *rc.given_up_through) {
      completeKey(job, *k, Status::unavailable(strCat("iteration ", k->trainer_iteration, " was given up by rank ",
                                                      rc.given_up_by, " while this agent was stalled")));
    } else if (ready) {
      completeKey(job, *k, {});
      ++completed;
      continue;
    } else {
      continue;  // no peer gave it up: its last slices are on their way (or it expires)
    }
    ++failed;
  }
  GC_LOG(kInfo, "agent", "job ", job, ": after the stall, of the reductions held (iterations from ", rc.from,
         " on) ", completed, " completed and ", failed, " failed",
         no_answer        ? strCat(" (", no_answer->message(), ")")
         : rc.job_gone_at ? strCat(" (rank ", *rc.job_gone_at, " has no such job any more)")
         : rc.given_up_through ? strCat(" (rank ", rc.given_up_by, " gave up iterations through ", *rc.given_up_through, ")")
                               : "");
  if (rc.given_up_through) {
    realigner_->realign(job, js, *rc.given_up_through + 1, strCat("rank ", rc.given_up_by,
                                                                  " gave the iteration up while this agent was stalled"));
    realigner_->announceToAll(job, js);
  }
}

}  // namespace gcagent::agent

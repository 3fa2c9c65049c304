// ReductionEngine's recovery: lost and returning peers, deadlines, realignment of a job's
// iterations (job_alignment.h) and membership changes (membership.h).
#include <algorithm>
#include <optional>
#include <tuple>

#include "agent/engine/engine_state.h"
#include "agent/wire/peer_frame.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::agent {

void ReductionEngine::onPeerDown(transport::Rank peer, const Status& why, bool shut_down) {
  const Status status = Status::unavailable(strCat("peer rank ", peer, " lost: ", why.message()));
  down_why_[peer] = why.message();
  shut_down_[peer] = shut_down;
  membership_.peerDown(peer, options_.now());
  stats_->recordError(why.code() == StatusCode::kDeadlineExceeded ? metrics::ErrorKind::kTimeout
                                                                  : metrics::ErrorKind::kPeerLost,
                      status.message());
  if (!membership_.isMember(peer)) return;  // left behind already: nothing here needs it
  for (auto& [job, js] : jobs_) failJob(job, status);
}

void ReductionEngine::onPeerUp(transport::Rank peer) {
  down_why_[peer].clear();
  shut_down_[peer] = false;
  membership_.peerUp(peer);
  view_told_[peer].reset();  // a restarted peer knows nothing
  tellView(peer);            // before any slice under it
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


std::vector<ReductionEngine::AwayMember> ReductionEngine::awayMembers() const {
  std::vector<AwayMember> away;
  const SteadyTime now = options_.now();
  for (const auto& [rank, since] : membership_.away())
    away.push_back({rank, secondsBetween(since, now), shut_down_[rank], down_why_[rank]});
  std::sort(away.begin(), away.end(), [](const AwayMember& a, const AwayMember& b) { return a.seconds > b.seconds; });
  return away;
}

std::optional<ReductionEngine::AwayMember> ReductionEngine::lostMember() const {
  if (options_.reduction_timeout <= 0) return std::nullopt;
  const std::vector<AwayMember> away = awayMembers();
  if (away.empty()) return std::nullopt;
  const bool shrink = options_.on_peer_loss == OnPeerLoss::kShrink;
  const double limit = options_.reduction_timeout + (shrink ? options_.shrink_grace : 0);
  const double seconds = away.front().seconds;
  if (seconds < limit) return std::nullopt;
  const std::string& why = away.front().why;
  const uint32_t rank = away.front().rank;
  return AwayMember{rank, seconds, away.front().shut_down, strCat(
      "node ", rank, " has been unreachable for ", static_cast<int64_t>(seconds), " s",
      why.empty() ? "" : strCat(" (", why, ")"), ", longer than ",
      shrink ? "transport.shrink_grace plus transport.reduction_timeout" : "transport.reduction_timeout", " (",
      limit, " s): ", shrink ? "the job could not go on without it (transport.min_nodes)" :
      "under transport.on_peer_loss = fail the job cannot go on without it")};
}

Status ReductionEngine::unreachableMember() const {
  const transport::Rank self = transport_.rank();
  if (!membership_.isMember(self)) {
    const std::string& apart = membership_.trainedApart();
    return Status::unavailable(strCat("this node is not in the job's membership, ", membership_.view().describe(),
                                      apart.empty() ? "" : strCat(" (", apart, ")"),
                                      ": it takes part again once the nodes take it back (at the next membership "
                                      "change, within a second or so of its links coming up)"));
  }
  GC_RETURN_IF_ERROR(membership_.problem());
  for (transport::Rank r : membership_.view().members)
    if (r != self && !transport_.peerUp(r))
      return Status::unavailable(strCat("peer rank ", r, " is down", down_why_[r].empty() ? "" : ": ", down_why_[r]));
  return {};
}

void ReductionEngine::tellView(transport::Rank to) {
  const MembershipView& view = membership_.view();
  if (to == transport_.rank() || view.epoch == 0 || view_told_[to] == view.id() || !transport_.peerUp(to)) return;
  MembershipNotice install;
  install.kind = MembershipNotice::Kind::kInstall;
  install.slot = view.id();
  install.view = view;
  if (transport_.send(to, encodePeerFrame(install), {}, nullptr).ok()) view_told_[to] = view.id();
}

void ReductionEngine::sendNotices(const std::vector<Membership::Outgoing>& notices) {
  for (const auto& [to, notice] : notices) {
    if (!transport_.peerUp(to)) continue;
    (void)transport_.send(to, encodePeerFrame(notice), {}, nullptr);
    if (notice.kind == MembershipNotice::Kind::kInstall) view_told_[to] = notice.view->id();
  }
}

void ReductionEngine::react(Membership::Reaction reaction, const std::string& why) {
  sendNotices(reaction.send);
  if (reaction.install) adoptView(*reaction.install, why);
}

void ReductionEngine::reviewMembership() {
  sendNotices(membership_.rejoinNotices());  // until the leader takes this node in anew
  react(membership_.review(options_.now()), "agreed by a majority of the nodes, proposed here as the lowest member up");
}

void ReductionEngine::onMembershipNotice(const transport::Message& m, const MembershipNotice& notice) {
  react(membership_.onNotice(m.from, notice), notice.kind == MembershipNotice::Kind::kInstall
                                                   ? strCat("heard from rank ", m.from)
                                                   : strCat("agreed by a majority of the nodes, proposed here"));
}

void ReductionEngine::adoptView(const MembershipView& view, const std::string& why) {
  const MembershipView before = membership_.view();
  // Slices owned here until now, and every slice whose hop may move (TopologyTraits).
  std::vector<std::tuple<uint64_t, uint64_t, uint32_t, bool>> owned;
  const transport::Rank self = transport_.rank();
  for (const auto& [job, js] : jobs_)
    for (const auto& [key, k] : js->keys) {
      const bool hops = traitsOf(k.topology).hops;
      for (uint32_t s = 0; s < k.slice_count; ++s)
        if (before.contains(self) && (hops || ownerOf(key, s) == self)) owned.emplace_back(job, key, s, hops);
    }
  if (!membership_.install(view)) return;
  // Passed on before any slice sent under it, to every peer that can hear it.
  for (transport::Rank r = 0; r < transport_.size(); ++r) tellView(r);
  const bool shrunk = view.members.size() < before.members.size();
  stats_->recovery(shrunk ? metrics::Stats::kShrunk : metrics::Stats::kGrown).Increment();
  stats_->gauge(metrics::Id::members, {}).Set(static_cast<double>(view.members.size()));
  stats_->gauge(metrics::Id::membership_epoch, {}).Set(static_cast<double>(view.epoch));
  const Status problem = membership_.problem();
  const std::string joined = view.joined.empty() ? "" : strCat("; nodes taken in anew load node ", *view.root(), "'s weights");
  GC_LOG(kWarn, "agent", "membership: ", before.describe(), " -> ", view.describe(), " (", why, ")", joined, "; ",
         !view.contains(self) ? "this node waits to be taken back"
         : !problem.ok()      ? problem.message()
                              : "this node's trainers now average over the new membership");
  // What is in flight was sliced for the old owners: it fails everywhere, and every job
  // then goes on from its nodes' frontier (job_alignment.h).
  const Status changed = Status::unavailable(strCat("the job's nodes changed to ", view.describe(),
                                                    ": this iteration is given up; the next runs on ",
                                                    view.members.size(), " nodes"));
  for (auto& [job, js] : jobs_) failJob(job, changed);
  owner_->setMembers(view.members);
  // Result residuals of slices that moved away go; the new owner starts from zero, and those
  // of a departed node went with it (DESIGN.md, "Recovery").
  for (const auto& [job, key, s, hops] : owned)
    if (hops || !view.contains(self) || ownerOf(key, s) != self) owner_->forgetResidual(job, key, s);
  for (auto& [job, js] : jobs_)
    for (transport::Rank r = 0; r < transport_.size(); ++r)
      if (r != self) announce(job, *js, r);
  sendNotices(membership_.rejoinNotices());  // a node that trained apart asks to be taken in anew
  if (options_.on_membership) options_.on_membership(view);
}

}  // namespace gcagent::agent

#include "agent/engine/job_realigner.h"

#include <algorithm>
#include <optional>

#include "agent/wire/peer_frame.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::agent {

JobRealigner::JobRealigner(transport::Transport& transport, OwnerSide& owner, metrics::Stats& stats, FailKey fail)
    : transport_(transport), owner_(owner), stats_(stats), fail_(std::move(fail)) {}

uint64_t JobRealigner::frontierOf(const JobState& js) {
  std::optional<uint64_t> active;
  uint64_t after = js.align.floor();
  for (const auto& [key, k] : js.keys) {
    if (k.active) active = std::min(active.value_or(UINT64_MAX), k.iteration);
    if (k.completed_once) after = std::max(after, k.last_iteration + 1);
  }
  return active.value_or(after);
}

void JobRealigner::announce(uint64_t job, JobState& js, transport::Rank to) {
  const uint64_t next = frontierOf(js);
  const uint64_t reload = js.reload.from();
  if (next == 0 || (next <= js.announced[to] && reload <= js.announced_reload[to]) || !transport_.peerUp(to)) return;
  js.announced[to] = std::max(js.announced[to], next);
  js.announced_reload[to] = std::max(js.announced_reload[to], reload);
  (void)transport_.send(to, encodePeerFrame(RealignNotice{job, next, reload}), {}, nullptr);
}

void JobRealigner::announceToAll(uint64_t job, JobState& js) {
  for (transport::Rank r = 0; r < transport_.size(); ++r)
    if (r != transport_.rank()) announce(job, js, r);
}

void JobRealigner::peerUp(uint64_t job, JobState& js, transport::Rank peer) {
  js.announced[peer] = 0;
  js.announced_reload[peer] = 0;
  announce(job, js, peer);
}

bool JobRealigner::realign(uint64_t job, JobState& js, uint64_t next, const std::string& why) {
  const uint64_t offset = js.align.offset();
  // Unless the trainers' newest step failed here or is in flight (it fails below), their next
  // one is a step the other nodes gave up: it fails here too (a given-up step fails on every
  // node, whether its notice or its submit comes first).
  bool newest_failed = js.align.newestFailed();
  for (const auto& [key, k] : js.keys) newest_failed |= k.active;
  if (!js.align.adopt(next, /*fail_next_step=*/!newest_failed)) return false;
  // A node ahead of `next` gives nothing up; one behind fails what it has in flight below it,
  // or its trainers' next step.
  bool gave_up = js.align.offset() != offset || js.align.nextGivenUp();
  const Status given_up = Status::unavailable(strCat("iteration given up to realign with the other nodes: ", why));
  for (auto& [key, k] : js.keys) {
    if (k.active && k.iteration < next) {
      fail_(job, k, given_up);
      gave_up = true;
    }
    owner_.dropSums(job, key, next - 1);
  }
  if (!gave_up) return false;
  js.reload.call(next);  // this node skipped iterations the others may have completed
  ++realignments_;
  stats_.recovery(metrics::Stats::kRealigned).Increment();
  GC_LOG(kInfo, "agent", "job ", job, ": realigned: iterations below ", next, " given up (", why,
         "); this node's trainers go on from their iteration ", next - js.align.offset());
  return true;
}

bool JobRealigner::giveUpInFlight(uint64_t job, JobState& js, const std::string& why) {
  std::optional<uint64_t> newest;
  for (const auto& [key, k] : js.keys)
    if (k.active) newest = std::max(newest.value_or(0), k.iteration);
  if (!newest) return false;
  realign(job, js, *newest + 1, why);
  announceToAll(job, js);
  return true;
}

bool JobRealigner::onNotice(transport::Rank from, const RealignNotice& notice, JobState* js) {
  if (js == nullptr) {  // the job is not declared here yet: its first step starts there
    auto& early = early_[notice.job];
    early.next = std::max(early.next, notice.next);
    early.reload_from = std::max(early.reload_from, notice.reload_from);
    return false;
  }
  if (notice.reload_from != 0) js->reload.call(notice.reload_from);
  return realign(notice.job, *js, notice.next, strCat("rank ", from, " goes on at iteration ", notice.next));
}

void JobRealigner::declared(uint64_t job, JobState& js) {
  auto early = early_.find(job);
  if (early == early_.end()) return;
  js.align.adopt(early->second.next);  // nothing started here yet: the first step maps onto it
  // The trainers kept their models across this agent's restart: theirs may lack a step that
  // completed elsewhere.
  if (early->second.reload_from != 0) js.reload.call(early->second.reload_from);
  early_.erase(early);
}

}  // namespace gcagent::agent

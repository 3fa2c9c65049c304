#include "agent/engine/peer_lanes.h"

#include "common/str_cat.h"
#include "scheduler/send_lane.h"

namespace gcagent::agent {

struct PeerLanes::Lane : scheduler::SendLane<Outgoing> {
  using SendLane::SendLane;
  bool sending = false;  // a completion during a send: send()'s loop goes on
};

PeerLanes::PeerLanes(transport::Transport& transport, uint32_t inflight_slices, uint64_t inflight_bytes,
                     std::shared_ptr<metrics::Stats> stats, scheduler::Planner& planner, SteadyNow now, Wanted wanted,
                     Refused refused)
    : transport_(transport), stats_(std::move(stats)), planner_(planner), now_(std::move(now)),
      wanted_(std::move(wanted)), refused_(std::move(refused)), alive_(std::make_shared<PeerLanes*>(this)) {
  for (transport::Rank r = 0; r < transport_.size(); ++r) {
    const bool self = r == transport_.rank();
    peer_stats_.push_back(self ? nullptr : &stats_->peer(r));
    lanes_.push_back(self ? nullptr : std::make_unique<Lane>(inflight_slices, inflight_bytes));
  }
}

PeerLanes::~PeerLanes() { *alive_ = nullptr; }

void PeerLanes::push(transport::Rank to, int32_t priority, Outgoing item) { lanes_[to]->push(priority, std::move(item)); }

size_t PeerLanes::queued(transport::Rank peer) const {
  return peer < lanes_.size() && lanes_[peer] ? lanes_[peer]->queued() : 0;
}

void PeerLanes::send(transport::Rank to) {
  Lane& lane = *lanes_[to];
  if (lane.sending) return;  // a completion during a send: the loop below goes on
  lane.sending = true;
  while (const Outgoing* next = lane.next()) {
    if (!lane.admits(next->payload.bytes.size())) break;
    Outgoing item = lane.pop();
    // A reduction that failed meanwhile leaves its queued contributions behind: dropped.
    if (item.kind == SliceKind::kContribution && !wanted_(item)) continue;
    const uint64_t bytes = item.payload.bytes.size();
    lane.take(bytes);
    // The gauge lives in the shared stats, which the callback keeps alive: sends may
    // complete after the lanes are gone.
    prometheus::Gauge* inflight = peer_stats_[to]->inflight;
    inflight->Increment();
    const auto handed = now_();
    Status s = transport_.send(to, item.header, item.payload.bytes,
                               [pin = item.payload.pin, inflight, bytes, handed, to, keep = stats_,
                                lanes = std::weak_ptr<PeerLanes*>(alive_)](const Status& done) {
                                 inflight->Decrement();
                                 if (auto l = lanes.lock(); l && *l) (*l)->onSent(to, bytes, handed, done);
                               });
    if (!s.ok()) {
      lane.refund(bytes);
      inflight->Decrement();
      refused_(item, Status::unavailable(strCat("sending tensor ", item.key, " to rank ", to, ": ", s.message())));
    }
  }
  lane.sending = false;
}

void PeerLanes::onSent(transport::Rank to, uint64_t bytes, SteadyTime handed, const Status& s) {
  if (auto took = lanes_[to]->complete(bytes, handed, now_(), s.ok())) planner_.recordWire(bytes, *took);
  send(to);
}

}  // namespace gcagent::agent

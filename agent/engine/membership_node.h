// This node's part in the job's membership: the agreement's state machine (membership.h) tied
// to the links. It sends the machine's notices, tells every peer the installed view before
// any slice under it, keeps why each peer went away, says why a reduction cannot start now,
// and hands each view it installs to the engine (which re-slices and realigns its jobs).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "agent/membership/membership.h"
#include "common/clock.h"
#include "common/log_throttle.h"
#include "common/status.h"
#include "metrics/health.h"
#include "metrics/stats.h"
#include "transport/transport.h"

namespace gcagent::agent {

struct MembershipNodeOptions {
  OnPeerLoss on_peer_loss = OnPeerLoss::kFail;  // transport.on_peer_loss
  double shrink_grace = 30;                     // transport.shrink_grace
  uint32_t min_nodes = 1;                       // transport.min_nodes
  Quorum quorum = Quorum::kMajority;            // transport.quorum
  double reduction_timeout = 60;                // transport.reduction_timeout; 0: none
  SteadyNow now = steadyNow;
  // Where this node's votes outlive a restart (agent.state_dir; vote_store.h); none: in memory.
  VoteKeeping votes = {};
};

// A member whose link is down: as /healthz reports it.
using AwayMember = metrics::AwayNode;

class MembershipNode {
 public:
  // A view installed here, after every peer that can hear it was told; with the view before
  // it and why it came.
  using Installed = std::function<void(const MembershipView& before, const MembershipView& view, const std::string& why)>;

  MembershipNode(transport::Transport& transport, MembershipNodeOptions options, metrics::Stats& stats,
                 Installed installed);

  const MembershipView& view() const { return state_.view(); }
  bool isMember(uint32_t rank) const { return state_.isMember(rank); }
  uint32_t size() const { return state_.size(); }
  uint32_t ownerOf(uint64_t key, uint32_t slice) const { return state_.ownerOf(key, slice); }

  // The peer's link went down (`shut_down`: it said goodbye) or came (back) up; a peer that
  // comes up hears the installed view first.
  void peerDown(transport::Rank peer, const std::string& why, bool shut_down);
  void peerUp(transport::Rank peer);
  // A membership notice from a peer.
  void onNotice(transport::Rank from, const MembershipNotice& notice);
  // The leader proposes a change once a member stayed away past the grace period or a node
  // outside the view is back; a node left out asks to be taken in anew. Every second or so.
  // The first installs the view this node had before it restarted (Membership::resumable).
  void review();
  // Sends `to` the installed view, unless it heard it from here already (a peer that sent a
  // slice under an older one).
  void tellView(transport::Rank to);
  // A reduction completed under the installed view (membership.h: stepCompleted).
  void stepCompleted() { state_.stepCompleted(); }

  // Why a reduction cannot start now: this node is outside the view, the view has no quorum,
  // or a member's link is down. Ok when it can.
  Status unreachable() const;
  // The members whose links are down now, longest away first.
  std::vector<AwayMember> away() const;
  // A member away so long that the job cannot go on without it: longer than
  // reduction_timeout under kFail, than shrink_grace plus reduction_timeout under kShrink
  // (it should have been left behind by then; min_nodes kept it). `why` names it, how long
  // and why; none while every member is up or within that time, or with no deadline.
  std::optional<AwayMember> lost() const;

 private:
  void send(const std::vector<Membership::Outgoing>& notices);
  void react(Membership::Reaction reaction, const std::string& why);
  void adopt(const MembershipView& view, const std::string& why);
  // Logs a vote that could not be kept (Membership::takeKeepFailure).
  void reportKeepFailure();

  transport::Transport& transport_;
  MembershipNodeOptions options_;
  metrics::Stats& stats_;
  Installed installed_;
  Membership state_;
  std::vector<std::optional<ViewId>> view_told_;  // by rank: the view it last heard of from here
  std::vector<std::string> down_why_;             // by rank: why a peer that is down went
  std::vector<bool> shut_down_;                   // by rank: it said goodbye when it went
  LogThrottle keep_failures_{std::chrono::seconds(10)};
};

}  // namespace gcagent::agent

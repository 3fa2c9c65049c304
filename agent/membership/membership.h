// Which nodes a job's reductions run on. It starts as every node in transport.peers; under
// transport.on_peer_loss = "shrink" it loses a node that stays away past the grace period
// and takes it back once its link is up again. Each change is a new *view*
// (agent/membership/membership_view.h); slices carry the view they were sent under, so a slice of any
// other view is stale.
//
// Agreement without a coordinator process, as Raft and Paxos agree: the installed view's
// *leader* (its lowest member this node reaches) proposes the next one, and it is installed
// only once a majority of the installed view's members voted for it (transport.quorum =
// majority, the default). Each next view is one decree of single-decree Paxos: the leader
// prepares a ballot, a majority promises it (reporting any view they accepted before, which
// the leader must then propose instead), the leader asks them to accept its view, and once a
// majority accepted, installs it and tells every node. Any two majorities of a view share a
// node, so at most one view follows each installed one: two halves of a partition can never
// both go on, a half without a majority of the last installed view stops (its steps fail
// with an error that says so), and installed views form one chain every node adopts in epoch
// order. transport.quorum = none installs a leader's view at once (a minority may go on);
// views of one epoch may then differ, the greater wins (MembershipView::newerThan), and a
// node that trained under the one that lost asks to be taken in anew (Rejoin), its trainers
// then loading the others' weights.
//
// A node's promise and acceptance must outlive its restart, or a node killed between its
// promise and the install votes again as if it never had, and two views of one epoch can
// form: with VoteKeeping (vote_store.h, agent.state_dir) every vote is kept on disk before its
// answer leaves, and a restarted node resumes with the view it had installed and its votes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/membership/membership_view.h"
#include "common/clock.h"
#include "common/status.h"

namespace gcagent::agent {

enum class OnPeerLoss { kFail, kShrink };
// Who must vote for a new view: a majority of the installed one, or only its leader.
enum class Quorum { kMajority, kNone };

// What a node holds of the agreement: the view installed here, and its votes on the one
// after it (the greatest ballot promised; the ballot and view accepted, if any).
struct VoteRecord {
  MembershipView installed;
  Ballot promised;
  std::optional<std::pair<Ballot, MembershipView>> accepted;
  bool operator==(const VoteRecord&) const = default;
};

// Where a node's votes outlive it (vote_store.h): the record kept before a restart, and how
// each new one is kept before the answer it backs leaves. Without `keep` votes live in memory
// only.
struct VoteKeeping {
  std::optional<VoteRecord> kept;
  std::function<Status(const VoteRecord&)> keep;
};

class Membership {
 public:
  struct Outgoing {
    uint32_t to = 0;
    MembershipNotice notice;
  };
  // What a review or a notice leads to: notices to send, and a view to install (the engine
  // installs it with install(), after failing what runs under the old one).
  struct Reaction {
    std::vector<Outgoing> send;
    std::optional<MembershipView> install;
  };

  // `min_nodes`: a shrink never leaves fewer members, whatever the quorum. `votes.kept`: the
  // votes of this node before it restarted, about the view it had installed then (resumable()).
  Membership(uint32_t world, uint32_t self, OnPeerLoss policy, double grace_seconds, uint32_t min_nodes = 1,
             Quorum quorum = Quorum::kMajority, VoteKeeping votes = {});

  const MembershipView& view() const { return view_; }
  bool isMember(uint32_t rank) const { return view_.contains(rank); }
  // Whether this node's trainers take part in the view's steps: a member, and not one that
  // trained under a view that lost and waits to be taken in anew.
  bool takesPart() const { return isMember(self_) && !lost_; }
  uint32_t size() const { return static_cast<uint32_t>(view_.members.size()); }
  // Why this node trained apart (transport.quorum = none), until a view takes it in anew; "".
  const std::string& trainedApart() const { return lost_why_; }
  // The owner of a tensor's slice: round robin over the members (scheduler::ownerOf).
  uint32_t ownerOf(uint64_t key, uint32_t slice) const;

  void peerDown(uint32_t rank, SteadyTime now);
  void peerUp(uint32_t rank);
  // The members (other than this node) whose links are down, and since when.
  std::vector<std::pair<uint32_t, SteadyTime>> away() const;
  // Why this node's steps cannot run under the installed view, or OK: it trained under a view
  // that lost, or (shrink, majority) the members it reaches are no majority of the view.
  Status problem() const;

  // The view this node would propose now, if it leads the installed one: without the members
  // gone longer than the grace period (shrink only; a peer never seen up is not gone, merely
  // late; never below min_nodes), with the nodes outside it whose links are up. None when
  // nothing changes.
  std::optional<MembershipView> propose(SteadyTime now) const;
  // Called about once a second: starts (or, after kRetrySeconds without an outcome, starts
  // again with a greater ballot) the agreement on propose()'s view.
  Reaction review(SteadyTime now);
  Reaction onNotice(uint32_t from, const MembershipNotice& notice);
  // Makes `view` the installed one if it follows, in epoch order, the one installed now (or,
  // under transport.quorum = none, wins over it); true then. Under none, a node that trained
  // under the view it leaves and is no joiner of the new one is lost until taken in anew;
  // the Rejoin to send is in rejoinNotices().
  bool install(const MembershipView& view);
  std::vector<Outgoing> rejoinNotices() const;
  // A step completed under the installed view: joiners have the others' weights from now on.
  void stepCompleted() { completed_ = true; }
  // The view this node had installed before it restarted, while a view before it is installed
  // here: the engine installs it (install()), which restores the votes kept with it. Until
  // then this node neither votes nor leads: its votes on the views in between are gone.
  std::optional<MembershipView> resumable() const;
  // Why the last vote could not be kept (VoteKeeping::keep failed; the answer it would have
  // backed was not sent, and a leader's attempt stopped), cleared by the call; OK when none.
  Status takeKeepFailure() { return std::exchange(keep_failure_, Status{}); }

  static constexpr double kRetrySeconds = 2.0;

 private:
  bool up(uint32_t rank) const { return rank == self_ || (up_[rank] && !down_since_[rank]); }
  bool leads() const;
  // In epoch order after the installed view (or, under quorum none, winning over it).
  bool follows(const MembershipView& v) const;
  bool majorityOf(const std::set<uint32_t>& voters) const;
  MembershipNotice notice(MembershipNotice::Kind kind) const;
  Reaction toEveryone(MembershipNotice n) const;
  Reaction startAccept();
  // Keeps these votes (VoteKeeping::keep), then holds them here; false, holding the old ones,
  // when they could not be kept.
  bool keep(Ballot promised, std::optional<std::pair<Ballot, MembershipView>> accepted);
  bool behind() const { return resume_ && resume_->installed.epoch > view_.epoch; }

  uint32_t world_, self_, min_nodes_;
  OnPeerLoss policy_;
  Quorum quorum_;
  SteadyClock::duration grace_;
  MembershipView view_;
  std::vector<bool> up_;  // seen up at least once
  std::vector<std::optional<SteadyTime>> down_since_;
  bool completed_ = false;  // a step completed under view_
  bool lost_ = false;       // trained under a view that lost (quorum none), until taken in anew
  std::string lost_why_;
  std::set<uint32_t> rejoining_;  // members that asked to be taken in anew (this node leads)

  // The agreement on the view after view_: this node's vote, and its attempt when it leads.
  Ballot promised_;
  std::optional<std::pair<Ballot, MembershipView>> accepted_;
  uint32_t highest_round_ = 0;
  struct Attempt {
    Ballot ballot;
    SteadyTime started;
    bool accepting = false;
    std::set<uint32_t> votes;
    std::optional<std::pair<Ballot, MembershipView>> prior;  // the highest-ballot view a voter accepted
    MembershipView value;
  };
  std::optional<Attempt> attempt_;
  VoteKeeping keeping_;
  std::optional<VoteRecord> resume_;  // kept before a restart, its view not installed again yet
  Status keep_failure_;
};

}  // namespace gcagent::agent

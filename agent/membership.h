// Which nodes a job's reductions run on. It starts as every node in transport.peers; under
// transport.on_peer_loss = "shrink" it loses a node that stays away past the grace period
// and takes it back once its link is up again. Each change is a new *view*, numbered by an
// epoch; slices carry the epoch they were sent under, so a slice of an older view is stale.
//
// Agreement without a coordinator process: only the view's *leader* (its lowest member this
// node can reach) proposes changes; every node adopts the greatest view it hears of, in an
// order every node computes alike (epoch, then more members, then the member list), and passes
// it on to every peer before it sends any slice under it. Links are ordered per pair, so a
// slice never arrives before the view it was sent under. Two leaders of a partitioned cluster
// may propose different views of one epoch; the order settles it once they hear each other,
// and each side's leader then takes the others back.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace gcagent::agent {

enum class OnPeerLoss { kFail, kShrink };

struct MembershipView {
  uint32_t epoch = 0;
  std::vector<uint32_t> members;  // node ranks, ascending

  bool contains(uint32_t rank) const;
  // The order every node adopts by: the greatest view it hears of wins.
  bool newerThan(const MembershipView& other) const;
  std::string describe() const;  // "epoch 2 (nodes 0, 2)"
  bool operator==(const MembershipView&) const = default;
};

// The view notice between agents, in the transport's header field beside slice headers:
//   u32 magic "GCAM" | u16 version | u16 member count | u32 epoch | u32 ranks[count]
std::vector<std::byte> encodeMembershipNotice(const MembershipView& view);
bool isMembershipNotice(std::span<const std::byte> header);
// Checks the ranks: ascending, below `world`, at least one.
Result<MembershipView> parseMembershipNotice(std::span<const std::byte> header, uint32_t world);

class Membership {
 public:
  // `min_nodes`: a shrink never leaves fewer members, so a node cut off from the rest waits
  // for them instead of training on its own.
  Membership(uint32_t world, uint32_t self, OnPeerLoss policy, double grace_seconds, uint32_t min_nodes = 1);

  const MembershipView& view() const { return view_; }
  bool isMember(uint32_t rank) const { return view_.contains(rank); }
  uint32_t size() const { return static_cast<uint32_t>(view_.members.size()); }
  // The owner of a tensor's slice: round robin over the members (scheduler::ownerOf).
  uint32_t ownerOf(uint64_t key, uint32_t slice) const;

  void peerDown(uint32_t rank, SteadyTime now);
  void peerUp(uint32_t rank);
  // The view this node proposes now, if it leads the current one: without the members gone
  // longer than the grace period (shrink only; a peer never seen up is not gone, merely late;
  // never below min_nodes), with the nodes outside it whose links are up. None when nothing
  // changes.
  std::optional<MembershipView> propose(SteadyTime now) const;
  // The members (other than this node) whose links are down, and since when.
  std::vector<std::pair<uint32_t, SteadyTime>> away() const;
  // Takes `view` when it is newer than the current one; true then.
  bool adopt(const MembershipView& view);

 private:
  bool up(uint32_t rank) const { return rank == self_ || (up_[rank] && !down_since_[rank]); }

  uint32_t world_, self_, min_nodes_;
  OnPeerLoss policy_;
  SteadyClock::duration grace_;
  MembershipView view_;
  std::vector<bool> up_;  // seen up at least once
  std::vector<std::optional<SteadyTime>> down_since_;
};

}  // namespace gcagent::agent

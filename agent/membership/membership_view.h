// A membership view: which nodes a job's reductions run on, and the notices agents agree on
// views with (agent/membership/membership.h).
//
// A view is identified by its epoch and the node that proposed it: every slice carries that
// identity (agent/wire/slice_message.h), so a slice, partial sum or result made under one view is
// never taken under another, even where two views share an epoch (only possible under
// transport.quorum = none, which lets a minority go on). `joined` names the members whose
// trainers hold a stale model: those taken (back) in since the last view in which a step
// completed. Every member's trainers load the weights of `root()` after the first step they
// complete under such a view.
#pragma once

#include <compare>
#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/status.h"

namespace gcagent::agent {

struct ViewId {
  uint32_t epoch = 0;
  uint32_t proposer = 0;
  auto operator<=>(const ViewId&) const = default;
};

struct MembershipView {
  uint32_t epoch = 0;
  uint32_t proposer = 0;  // the node that proposed it (0 for the first view, which nobody proposes)
  uint32_t parent = 0;    // the proposer of the view it follows, whose epoch is one less
  std::vector<uint32_t> members;  // node ranks, ascending
  std::vector<uint32_t> joined;   // members whose trainers load root()'s weights; ascending

  ViewId id() const { return {epoch, proposer}; }
  ViewId parentId() const { return {epoch == 0 ? 0 : epoch - 1, parent}; }
  bool contains(uint32_t rank) const;
  bool joins(uint32_t rank) const;
  // The lowest member whose trainers hold the model the others load; none when nobody joined
  // (or everybody did).
  std::optional<uint32_t> root() const;
  // The order two views of one epoch are settled by (transport.quorum = none only): more
  // members, then the lower proposer.
  bool newerThan(const MembershipView& other) const;
  std::string describe() const;  // "epoch 2 (nodes 0, 2)"
  bool operator==(const MembershipView&) const = default;
};

// A ballot of the agreement on the view that follows an installed one: greater rounds win,
// then greater nodes.
struct Ballot {
  uint32_t round = 0;
  uint32_t node = 0;
  auto operator<=>(const Ballot&) const = default;
};

// Every notice between agents about views, a peer frame (agent/wire/peer_frame.h) of the fields
// frameFields lists. The slot is the installed view a proposal follows. Install carries the
// agreed view; Prepare and Accept are the leader's two rounds (Accept with its view), Promise
// and Accepted their answers (a Promise with the view its sender accepted before, under
// `accepted`), Refuse says a greater ballot was promised, and Rejoin asks the leader of the
// slot's view to take the sender in anew (it trained under a view that lost, transport.quorum
// = none).
struct MembershipNotice {
  enum class Kind : uint8_t { kInstall = 1, kPrepare, kPromise, kAccept, kAccepted, kRefuse, kRejoin };
  Kind kind = Kind::kInstall;
  ViewId slot;
  Ballot ballot;
  Ballot accepted;
  std::optional<MembershipView> view;
  bool operator==(const MembershipNotice&) const = default;
};
std::string_view noticeKindName(MembershipNotice::Kind kind);

// The fields in wire order (agent/wire/peer_frame.h).
template <class M, class F>
  requires std::same_as<std::remove_const_t<M>, MembershipView>
void frameFields(M& v, F& f) {
  f.num(v.epoch);
  f.num(v.proposer);
  f.num(v.parent);
  f.ranks(v.members);
  f.ranks(v.joined);
}
template <class M, class F>
  requires std::same_as<std::remove_const_t<M>, MembershipNotice>
void frameFields(M& n, F& f) {
  f.num(n.kind);
  f.num(n.slot.epoch);
  f.num(n.slot.proposer);
  f.num(n.ballot.round);
  f.num(n.ballot.node);
  f.num(n.accepted.round);
  f.num(n.accepted.node);
  f.optional(n.view);
}
// The kind known, a view where the kind needs one, and the view's ranks: ascending, below
// `world`, at least one member, joined ones among the members.
Status checkFrame(const MembershipNotice& notice, uint32_t world);

}  // namespace gcagent::agent

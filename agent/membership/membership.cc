#include "agent/membership/membership.h"

#include <algorithm>

#include "common/str_cat.h"
#include "scheduler/slicing.h"

namespace gcagent::agent {

using Kind = MembershipNotice::Kind;

Membership::Membership(uint32_t world, uint32_t self, OnPeerLoss policy, double grace_seconds, uint32_t min_nodes,
                       Quorum quorum, VoteKeeping votes)
    : world_(world), self_(self), min_nodes_(min_nodes), policy_(policy), quorum_(quorum),
      grace_(steadySeconds(grace_seconds)), up_(world, false), down_since_(world), keeping_(std::move(votes)) {
  for (uint32_t r = 0; r < world; ++r) view_.members.push_back(r);
  resume_ = std::move(keeping_.kept);
  keeping_.kept.reset();
  if (resume_ && resume_->installed == view_) {  // votes on the first view's successor
    promised_ = resume_->promised;
    accepted_ = resume_->accepted;
    resume_.reset();
  }
}

std::optional<MembershipView> Membership::resumable() const {
  if (!behind()) return std::nullopt;
  return resume_->installed;
}

bool Membership::keep(Ballot promised, std::optional<std::pair<Ballot, MembershipView>> accepted) {
  if (keeping_.keep) {
    Status kept = keeping_.keep(VoteRecord{view_, promised, accepted});
    if (!kept.ok()) {
      keep_failure_ = std::move(kept);
      return false;
    }
  }
  promised_ = promised;
  accepted_ = std::move(accepted);
  return true;
}

uint32_t Membership::ownerOf(uint64_t key, uint32_t slice) const {
  return view_.members[scheduler::ownerOf(key, slice, size())];
}

void Membership::peerDown(uint32_t rank, SteadyTime now) {
  if (!down_since_[rank]) down_since_[rank] = now;
}

void Membership::peerUp(uint32_t rank) {
  up_[rank] = true;
  down_since_[rank].reset();
}

std::vector<std::pair<uint32_t, SteadyTime>> Membership::away() const {
  std::vector<std::pair<uint32_t, SteadyTime>> found;
  for (uint32_t r : view_.members)
    if (r != self_ && down_since_[r]) found.emplace_back(r, *down_since_[r]);
  return found;
}

bool Membership::majorityOf(const std::set<uint32_t>& voters) const {
  size_t count = 0;
  for (uint32_t r : voters) count += view_.contains(r);
  return 2 * count > view_.members.size();
}

Status Membership::problem() const {
  if (lost_) return Status::unavailable(lost_why_);
  if (policy_ != OnPeerLoss::kShrink || quorum_ != Quorum::kMajority || !isMember(self_)) return {};
  std::set<uint32_t> reached;
  for (uint32_t r : view_.members)
    if (up(r)) reached.insert(r);
  if (majorityOf(reached)) return {};
  return Status::unavailable(strCat(
      "the job has no quorum: this node reaches ", reached.size(), " of the ", size(), " nodes of ", view_.describe(),
      ", no majority (", size() / 2 + 1, " needed under transport.quorum = majority); its steps fail until it "
      "reaches them again, while a part of the cluster that holds a majority may go on without it"));
}

bool Membership::leads() const {
  for (uint32_t r : view_.members) {
    if (r == self_) return true;
    if (up(r)) return false;
  }
  return false;
}

std::optional<MembershipView> Membership::propose(SteadyTime now) const {
  if (policy_ != OnPeerLoss::kShrink || lost_ || !leads()) return std::nullopt;
  MembershipView next{view_.epoch + 1, self_, view_.proposer, {}, {}};
  for (uint32_t r = 0; r < world_; ++r) {
    const bool gone = view_.contains(r) && up_[r] && down_since_[r] && now - *down_since_[r] >= grace_;
    const bool back = !view_.contains(r) && up(r);
    if (view_.contains(r) ? !gone : back) next.members.push_back(r);
  }
  if (next.members.size() < std::min(min_nodes_, size())) return std::nullopt;
  bool asked = false;
  for (uint32_t r : next.members) {
    asked |= rejoining_.count(r) > 0;
    // Joiners of the installed view stay joiners until a step completes under a view.
    if (!view_.contains(r) || rejoining_.count(r) || (!completed_ && view_.joins(r))) next.joined.push_back(r);
  }
  if (next.members == view_.members && !asked) return std::nullopt;
  return next;
}

MembershipNotice Membership::notice(Kind kind) const {
  MembershipNotice n;
  n.kind = kind;
  n.slot = view_.id();
  return n;
}

Membership::Reaction Membership::toEveryone(MembershipNotice n) const {
  Reaction out;
  for (uint32_t r = 0; r < world_; ++r)
    if (r != self_ && up(r)) out.send.push_back({r, n});
  return out;
}

Membership::Reaction Membership::review(SteadyTime now) {
  auto next = propose(now);
  if (!next) {
    attempt_.reset();
    return {};
  }
  if (quorum_ == Quorum::kNone) return {{}, std::move(next)};
  if (behind()) {  // resumable() first
    attempt_.reset();
    return {};
  }
  if (attempt_ && now - attempt_->started < steadySeconds(kRetrySeconds)) return {};
  std::set<uint32_t> reached;
  for (uint32_t r : view_.members)
    if (up(r)) reached.insert(r);
  if (!majorityOf(reached)) {  // problem() says so to the trainers
    attempt_.reset();
    return {};
  }
  const Ballot ballot{std::max(highest_round_, promised_.round) + 1, self_};
  highest_round_ = ballot.round;
  if (!keep(ballot, accepted_)) {  // its own promise
    attempt_.reset();
    return {};
  }
  attempt_ = Attempt{ballot, now, false, {self_}, accepted_, std::move(*next)};
  if (majorityOf(attempt_->votes)) return startAccept();
  MembershipNotice prepare = notice(Kind::kPrepare);
  prepare.ballot = ballot;
  return toEveryone(prepare);
}

Membership::Reaction Membership::startAccept() {
  Attempt& a = *attempt_;
  if (promised_ != a.ballot) {  // it promised a greater ballot meanwhile: it may not accept its own
    attempt_.reset();
    return {};
  }
  a.accepting = true;
  a.votes = {self_};
  // A view a voter accepted before may have been installed somewhere: it is the one proposed.
  if (a.prior) a.value = a.prior->second;
  if (!keep(promised_, std::make_pair(a.ballot, a.value))) {  // its own acceptance
    attempt_.reset();
    return {};
  }
  if (majorityOf(a.votes)) return {{}, a.value};
  MembershipNotice accept = notice(Kind::kAccept);
  accept.ballot = a.ballot;
  accept.view = a.value;
  return toEveryone(accept);
}

Membership::Reaction Membership::onNotice(uint32_t from, const MembershipNotice& n) {
  Reaction out;
  auto reply = [&](MembershipNotice answer) { out.send.push_back({from, std::move(answer)}); };
  auto tellInstalled = [&] {
    MembershipNotice install = notice(Kind::kInstall);
    install.view = view_;
    reply(install);
  };
  // A notice about the view after another one: a sender behind hears the installed view; one
  // ahead will tell this node its own.
  if (n.kind != Kind::kInstall && n.slot != view_.id()) {
    if (n.slot.epoch < view_.epoch && view_.epoch > 0) tellInstalled();
    return out;
  }
  switch (n.kind) {
    case Kind::kInstall: {
      const MembershipView& v = *n.view;
      if (follows(v))
        out.install = v;
      else if (view_.epoch > 0 && v != view_ && !(v.epoch == view_.epoch && quorum_ == Quorum::kMajority))
        tellInstalled();
      break;
    }
    case Kind::kPrepare: {
      highest_round_ = std::max(highest_round_, n.ballot.round);
      if (behind()) break;  // its promises on this view's successor are gone: no answer
      MembershipNotice answer = notice(n.ballot > promised_ ? Kind::kPromise : Kind::kRefuse);
      if (n.ballot > promised_) {
        if (!keep(n.ballot, accepted_)) break;  // a promise not kept is not given
        answer.ballot = n.ballot;
        if (accepted_) {
          answer.accepted = accepted_->first;
          answer.view = accepted_->second;
        }
      } else {
        answer.ballot = promised_;
      }
      reply(answer);
      break;
    }
    case Kind::kPromise:
      if (!attempt_ || attempt_->accepting || n.ballot != attempt_->ballot || !view_.contains(from)) break;
      attempt_->votes.insert(from);
      if (n.view && n.view->parentId() == view_.id() && (!attempt_->prior || n.accepted > attempt_->prior->first))
        attempt_->prior = std::make_pair(n.accepted, *n.view);
      if (majorityOf(attempt_->votes)) return startAccept();
      break;
    case Kind::kAccept: {
      const bool follows = n.view->parentId() == view_.id() && n.view->epoch == view_.epoch + 1;
      if (!follows || behind()) break;
      MembershipNotice answer = notice(n.ballot >= promised_ ? Kind::kAccepted : Kind::kRefuse);
      if (n.ballot >= promised_) {
        if (!keep(n.ballot, std::make_pair(n.ballot, *n.view))) break;
        answer.ballot = n.ballot;
      } else {
        answer.ballot = promised_;
      }
      reply(answer);
      break;
    }
    case Kind::kAccepted:
      if (!attempt_ || !attempt_->accepting || n.ballot != attempt_->ballot || !view_.contains(from)) break;
      attempt_->votes.insert(from);
      if (majorityOf(attempt_->votes)) {
        out.install = attempt_->value;
        attempt_.reset();
      }
      break;
    case Kind::kRefuse:
      highest_round_ = std::max(highest_round_, n.ballot.round);
      if (attempt_ && n.ballot > attempt_->ballot) attempt_.reset();  // the next review tries above it
      break;
    case Kind::kRejoin:
      if (view_.contains(from)) rejoining_.insert(from);
      break;
  }
  return out;
}

bool Membership::follows(const MembershipView& v) const {
  return v.epoch > view_.epoch || (quorum_ == Quorum::kNone && v.epoch == view_.epoch && v.newerThan(view_));
}

bool Membership::install(const MembershipView& v) {
  if (!follows(v)) return false;
  // Under quorum none a view that does not follow this node's may come from a part of the
  // cluster that trained apart: a member that trained here and is no joiner there holds
  // another model, and must be taken in anew.
  const bool apart = quorum_ == Quorum::kNone && v.parentId() != view_.id() && completed_ && isMember(self_) &&
                     !v.joins(self_);
  if (apart) {
    lost_ = v.contains(self_);  // a member must ask; a non-member is taken in anew anyway
    lost_why_ = strCat("this node trained under ", view_.describe(), " (proposed by node ", view_.proposer,
                       "), a membership that lost to ", v.describe(), " (proposed by node ", v.proposer,
                       ") once the nodes heard each other (transport.quorum = none let both go on); its trainers' "
                       "steps fail until the nodes take it in anew, and then load the others' weights");
  } else if (v.joins(self_)) {
    lost_ = false;
    lost_why_.clear();
  } else if (!v.contains(self_)) {
    lost_ = false;
  }
  view_ = v;
  completed_ = false;
  attempt_.reset();
  if (resume_ && resume_->installed == v) {  // the view it had before it restarted: and its votes
    promised_ = resume_->promised;
    accepted_ = resume_->accepted;
    resume_.reset();
  } else {
    if (resume_ && v.epoch >= resume_->installed.epoch) resume_.reset();
    promised_ = {};
    accepted_.reset();
    // A restart resumes from here (where this fails: from an older view, and hears this one).
    if (!behind()) (void)keep({}, std::nullopt);
  }
  std::erase_if(rejoining_, [&](uint32_t r) { return !v.contains(r) || v.joins(r); });
  return true;
}

std::vector<Membership::Outgoing> Membership::rejoinNotices() const {
  std::vector<Outgoing> out;
  if (!lost_) return out;
  for (uint32_t r : view_.members)
    if (r != self_ && up(r)) out.push_back({r, notice(Kind::kRejoin)});
  return out;
}

}  // namespace gcagent::agent

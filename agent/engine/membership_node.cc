#include "agent/engine/membership_node.h"

#include <algorithm>

#include "agent/wire/peer_frame.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::agent {

MembershipNode::MembershipNode(transport::Transport& transport, MembershipNodeOptions options, metrics::Stats& stats,
                               Installed installed)
    : transport_(transport),
      options_(std::move(options)),
      stats_(stats),
      installed_(std::move(installed)),
      state_(transport.size(), transport.rank(), options_.on_peer_loss, options_.shrink_grace, options_.min_nodes,
             options_.quorum, std::exchange(options_.votes, {})),
      view_told_(transport.size()),
      down_why_(transport.size()),
      shut_down_(transport.size()) {
  stats_.gauge(metrics::Id::members, {}).Set(static_cast<double>(transport.size()));
}

void MembershipNode::peerDown(transport::Rank peer, const std::string& why, bool shut_down) {
  down_why_[peer] = why;
  shut_down_[peer] = shut_down;
  state_.peerDown(peer, options_.now());
}

void MembershipNode::peerUp(transport::Rank peer) {
  down_why_[peer].clear();
  shut_down_[peer] = false;
  state_.peerUp(peer);
  view_told_[peer].reset();  // a restarted peer knows nothing
  tellView(peer);            // before any slice under it
}

void MembershipNode::tellView(transport::Rank to) {
  const MembershipView& view = state_.view();
  if (to == transport_.rank() || view.epoch == 0 || view_told_[to] == view.id() || !transport_.peerUp(to)) return;
  MembershipNotice install;
  install.kind = MembershipNotice::Kind::kInstall;
  install.slot = view.id();
  install.view = view;
  if (transport_.send(to, encodePeerFrame(install), {}, nullptr).ok()) view_told_[to] = view.id();
}

void MembershipNode::send(const std::vector<Membership::Outgoing>& notices) {
  for (const auto& [to, notice] : notices) {
    if (!transport_.peerUp(to)) continue;
    (void)transport_.send(to, encodePeerFrame(notice), {}, nullptr);
    if (notice.kind == MembershipNotice::Kind::kInstall) view_told_[to] = notice.view->id();
  }
}

void MembershipNode::react(Membership::Reaction reaction, const std::string& why) {
  reportKeepFailure();
  send(reaction.send);
  if (reaction.install) adopt(*reaction.install, why);
}

void MembershipNode::reportKeepFailure() {
  const Status failure = state_.takeKeepFailure();
  uint64_t held = 0;
  if (failure.ok() || !keep_failures_.allow(options_.now(), &held)) return;
  GC_LOG(kError, "agent", "membership: ", failure.message(), "; this node gives no promise or acceptance (and "
         "leads no change) until its votes can be kept", held ? strCat(" (", held, " more such failures)") : "");
}

void MembershipNode::review() {
  if (auto resumed = state_.resumable())
    adopt(*resumed, "installed here before this agent restarted, kept in agent.state_dir");
  send(state_.rejoinNotices());  // until the leader takes this node in anew
  react(state_.review(options_.now()), "agreed by a majority of the nodes, proposed here as the lowest member up");
}

void MembershipNode::onNotice(transport::Rank from, const MembershipNotice& notice) {
  react(state_.onNotice(from, notice), notice.kind == MembershipNotice::Kind::kInstall
                                           ? strCat("heard from rank ", from)
                                           : strCat("agreed by a majority of the nodes, proposed here"));
}

void MembershipNode::adopt(const MembershipView& view, const std::string& why) {
  const MembershipView before = state_.view();
  const bool installed = state_.install(view);
  reportKeepFailure();
  if (!installed) return;
  // Passed on before any slice sent under it, to every peer that can hear it.
  for (transport::Rank r = 0; r < transport_.size(); ++r) tellView(r);
  const bool shrunk = view.members.size() < before.members.size();
  stats_.recovery(shrunk ? metrics::Stats::kShrunk : metrics::Stats::kGrown).Increment();
  stats_.gauge(metrics::Id::members, {}).Set(static_cast<double>(view.members.size()));
  stats_.gauge(metrics::Id::membership_epoch, {}).Set(static_cast<double>(view.epoch));
  const Status problem = state_.problem();
  const std::string joined = view.joined.empty() ? "" : strCat("; nodes taken in anew load node ", *view.root(), "'s weights");
  GC_LOG(kWarn, "agent", "membership: ", before.describe(), " -> ", view.describe(), " (", why, ")", joined, "; ",
         !view.contains(transport_.rank()) ? "this node waits to be taken back"
         : !problem.ok()                   ? problem.message()
                                           : "this node's trainers now average over the new membership");
  installed_(before, view, why);
  send(state_.rejoinNotices());  // a node that trained apart asks to be taken in anew
}

Status MembershipNode::unreachable() const {
  const transport::Rank self = transport_.rank();
  if (!state_.isMember(self)) {
    const std::string& apart = state_.trainedApart();
    return Status::unavailable(strCat("this node is not in the job's membership, ", state_.view().describe(),
                                      apart.empty() ? "" : strCat(" (", apart, ")"),
                                      ": it takes part again once the nodes take it back (at the next membership "
                                      "change, within a second or so of its links coming up)"));
  }
  GC_RETURN_IF_ERROR(state_.problem());
  for (transport::Rank r : state_.view().members)
    if (r != self && !transport_.peerUp(r))
      return Status::unavailable(strCat("peer rank ", r, " is down", down_why_[r].empty() ? "" : ": ", down_why_[r]));
  return {};
}

std::vector<AwayMember> MembershipNode::away() const {
  std::vector<AwayMember> away;
  const SteadyTime now = options_.now();
  for (const auto& [rank, since] : state_.away())
    away.push_back({rank, secondsBetween(since, now), shut_down_[rank], down_why_[rank]});
  std::sort(away.begin(), away.end(), [](const AwayMember& a, const AwayMember& b) { return a.seconds > b.seconds; });
  return away;
}

std::optional<AwayMember> MembershipNode::lost() const {
  if (options_.reduction_timeout <= 0) return std::nullopt;
  const std::vector<AwayMember> members = away();
  if (members.empty()) return std::nullopt;
  const bool shrink = options_.on_peer_loss == OnPeerLoss::kShrink;
  const double limit = options_.reduction_timeout + (shrink ? options_.shrink_grace : 0);
  const AwayMember& longest = members.front();
  if (longest.seconds < limit) return std::nullopt;
  return AwayMember{longest.rank, longest.seconds, longest.shut_down, strCat(
      "node ", longest.rank, " has been unreachable for ", static_cast<int64_t>(longest.seconds), " s",
      longest.why.empty() ? "" : strCat(" (", longest.why, ")"), ", longer than ",
      shrink ? "transport.shrink_grace plus transport.reduction_timeout" : "transport.reduction_timeout", " (",
      limit, " s): ", shrink ? "the job could not go on without it (transport.min_nodes)" :
      "under transport.on_peer_loss = fail the job cannot go on without it")};
}

}  // namespace gcagent::agent

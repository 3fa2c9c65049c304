#include "agent/membership/membership_view.h"

#include <algorithm>
#include <tuple>

#include "common/str_cat.h"

namespace gcagent::agent {
namespace {
using Kind = MembershipNotice::Kind;

bool carriesView(Kind kind) { return kind == Kind::kInstall || kind == Kind::kAccept; }

Status checkRanks(const std::vector<uint32_t>& ranks, uint32_t world, const char* what) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] >= world)
      return Status::invalidArgument(strCat(what, " rank ", ranks[i], " of ", world, " nodes"));
    if (i > 0 && ranks[i] <= ranks[i - 1]) return Status::invalidArgument(strCat(what, " ranks not ascending"));
  }
  return {};
}
}  // namespace

bool MembershipView::contains(uint32_t rank) const {
  return std::binary_search(members.begin(), members.end(), rank);
}

bool MembershipView::joins(uint32_t rank) const { return std::binary_search(joined.begin(), joined.end(), rank); }

std::optional<uint32_t> MembershipView::root() const {
  if (joined.empty()) return std::nullopt;
  for (uint32_t r : members)
    if (!joins(r)) return r;
  return std::nullopt;
}

bool MembershipView::newerThan(const MembershipView& other) const {
  // Fewer-is-older on the proposer: the lower one wins a tie, as the lower node leads.
  return std::make_tuple(epoch, members.size(), other.proposer) >
         std::make_tuple(other.epoch, other.members.size(), proposer);
}

std::string MembershipView::describe() const {
  std::string nodes;
  for (uint32_t r : members) nodes += strCat(nodes.empty() ? "" : ", ", r);
  return strCat("epoch ", epoch, " (node", members.size() == 1 ? " " : "s ", nodes, ")");
}

std::string_view noticeKindName(Kind kind) {
  switch (kind) {
    case Kind::kInstall: return "install";
    case Kind::kPrepare: return "prepare";
    case Kind::kPromise: return "promise";
    case Kind::kAccept: return "accept";
    case Kind::kAccepted: return "accepted";
    case Kind::kRefuse: return "refuse";
    case Kind::kRejoin: return "rejoin";
  }
  return "unknown";
}

Status checkFrame(const MembershipNotice& n, uint32_t world) {
  const auto kind = static_cast<uint8_t>(n.kind);
  if (kind < static_cast<uint8_t>(Kind::kInstall) || kind > static_cast<uint8_t>(Kind::kRejoin))
    return Status::invalidArgument(strCat("unknown kind ", int{kind}));
  if (carriesView(n.kind) && !n.view) return Status::invalidArgument(strCat(noticeKindName(n.kind), " without a view"));
  if (!n.view) return {};
  const MembershipView& v = *n.view;
  if (v.members.empty()) return Status::invalidArgument("no members");
  GC_RETURN_IF_ERROR(checkRanks(v.members, world, "member"));
  GC_RETURN_IF_ERROR(checkRanks(v.joined, world, "joined"));
  if (v.proposer >= world || v.parent >= world)
    return Status::invalidArgument(strCat("proposer ", std::max(v.proposer, v.parent), " of ", world, " nodes"));
  for (uint32_t j : v.joined)
    if (!v.contains(j)) return Status::invalidArgument(strCat("joined rank ", j, " is no member"));
  return {};
}

}  // namespace gcagent::agent

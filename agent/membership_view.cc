#include "agent/membership_view.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "common/byte_io.h"
#include "common/str_cat.h"

namespace gcagent::agent {
namespace {
constexpr uint32_t kMagic = 0x4d414347;  // "GCAM"
constexpr uint16_t kVersion = 2;         // 2: proposals and votes, views identified by their proposer
constexpr size_t kFixedBytes = 32;
constexpr size_t kViewBytes = 16;
using Kind = MembershipNotice::Kind;

bool carriesView(Kind kind) { return kind == Kind::kInstall || kind == Kind::kAccept; }

Status checkRanks(const std::vector<uint32_t>& ranks, uint32_t world, const char* what) {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] >= world)
      return Status::invalidArgument(strCat("membership notice: ", what, " rank ", ranks[i], " of ", world, " nodes"));
    if (i > 0 && ranks[i] <= ranks[i - 1])
      return Status::invalidArgument(strCat("membership notice: ", what, " ranks not ascending"));
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

std::vector<std::byte> encodeMembershipNotice(const MembershipNotice& n) {
  ByteWriter w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(static_cast<uint8_t>(n.kind));
  w.put(static_cast<uint8_t>(n.view.has_value()));
  w.put(n.slot.epoch);
  w.put(n.slot.proposer);
  w.put(n.ballot.round);
  w.put(n.ballot.node);
  w.put(n.accepted.round);
  w.put(n.accepted.node);
  if (n.view) {
    w.put(n.view->epoch);
    w.put(n.view->proposer);
    w.put(n.view->parent);
    w.put(static_cast<uint16_t>(n.view->members.size()));
    w.put(static_cast<uint16_t>(n.view->joined.size()));
    for (uint32_t r : n.view->members) w.put(r);
    for (uint32_t r : n.view->joined) w.put(r);
  }
  return w.take();
}

bool isMembershipNotice(std::span<const std::byte> header) {
  uint32_t magic = 0;
  if (header.size() < sizeof magic) return false;
  std::memcpy(&magic, header.data(), sizeof magic);
  return magic == kMagic;
}

Result<MembershipNotice> parseMembershipNotice(std::span<const std::byte> header, uint32_t world) {
  if (header.size() < kFixedBytes)
    return Status::dataLoss(strCat("membership notice: ", header.size(), " bytes, expected at least ", kFixedBytes));
  ByteReader r(header);
  uint32_t magic = 0;
  uint16_t version = 0;
  uint8_t kind = 0, has_view = 0;
  MembershipNotice n;
  r.get(magic);
  r.get(version);
  r.get(kind);
  r.get(has_view);
  r.get(n.slot.epoch);
  r.get(n.slot.proposer);
  r.get(n.ballot.round);
  r.get(n.ballot.node);
  r.get(n.accepted.round);
  r.get(n.accepted.node);
  if (magic != kMagic) return Status::invalidArgument(strCat("membership notice: bad magic 0x", std::hex, magic));
  if (version != kVersion)
    return Status::invalidArgument(strCat("membership notice: version ", version, ", expected ", kVersion));
  if (kind < static_cast<uint8_t>(Kind::kInstall) || kind > static_cast<uint8_t>(Kind::kRejoin))
    return Status::invalidArgument(strCat("membership notice: unknown kind ", static_cast<int>(kind)));
  n.kind = static_cast<Kind>(kind);
  if (has_view > 1) return Status::invalidArgument("membership notice: view flag not 0 or 1");
  if (carriesView(n.kind) && !has_view)
    return Status::invalidArgument(strCat("membership notice: ", noticeKindName(n.kind), " without a view"));
  if (!has_view) {
    if (header.size() != kFixedBytes)
      return Status::dataLoss(strCat("membership notice: ", header.size(), " bytes, expected ", kFixedBytes));
    return n;
  }
  if (header.size() < kFixedBytes + kViewBytes)
    return Status::dataLoss(strCat("membership notice: ", header.size(), " bytes, too short for its view"));
  MembershipView v;
  uint16_t members = 0, joined = 0;
  r.get(v.epoch);
  r.get(v.proposer);
  r.get(v.parent);
  r.get(members);
  r.get(joined);
  if (header.size() != kFixedBytes + kViewBytes + 4u * (members + joined))
    return Status::dataLoss(strCat("membership notice: ", header.size(), " bytes for ", members, " members and ",
                                   joined, " joined"));
  if (members == 0) return Status::invalidArgument("membership notice: no members");
  v.members.resize(members);
  v.joined.resize(joined);
  for (uint32_t& m : v.members) r.get(m);
  for (uint32_t& m : v.joined) r.get(m);
  GC_RETURN_IF_ERROR(checkRanks(v.members, world, "member"));
  GC_RETURN_IF_ERROR(checkRanks(v.joined, world, "joined"));
  if (v.proposer >= world || v.parent >= world)
    return Status::invalidArgument(strCat("membership notice: proposer ", std::max(v.proposer, v.parent), " of ",
                                          world, " nodes"));
  for (uint32_t j : v.joined)
    if (!v.contains(j)) return Status::invalidArgument(strCat("membership notice: joined rank ", j, " is no member"));
  n.view = std::move(v);
  return n;
}

}  // namespace gcagent::agent

#include "agent/membership.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "common/byte_io.h"
#include "common/str_cat.h"
#include "scheduler/slicing.h"

namespace gcagent::agent {
namespace {
constexpr uint32_t kMagic = 0x4d414347;  // "GCAM"
constexpr uint16_t kVersion = 1;
constexpr size_t kFixedBytes = 12;
}  // namespace

bool MembershipView::contains(uint32_t rank) const {
  return std::binary_search(members.begin(), members.end(), rank);
}

bool MembershipView::newerThan(const MembershipView& other) const {
  return std::make_tuple(epoch, members.size(), std::cref(members)) >
         std::make_tuple(other.epoch, other.members.size(), std::cref(other.members));
}

std::string MembershipView::describe() const {
  std::string nodes;
  for (uint32_t r : members) nodes += strCat(nodes.empty() ? "" : ", ", r);
  return strCat("epoch ", epoch, " (node", members.size() == 1 ? " " : "s ", nodes, ")");
}

std::vector<std::byte> encodeMembershipNotice(const MembershipView& view) {
  ByteWriter w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(static_cast<uint16_t>(view.members.size()));
  w.put(view.epoch);
  for (uint32_t r : view.members) w.put(r);
  return w.take();
}

bool isMembershipNotice(std::span<const std::byte> header) {
  uint32_t magic = 0;
  if (header.size() < sizeof magic) return false;
  std::memcpy(&magic, header.data(), sizeof magic);
  return magic == kMagic;
}

Result<MembershipView> parseMembershipNotice(std::span<const std::byte> header, uint32_t world) {
  if (header.size() < kFixedBytes)
    return Status::dataLoss(strCat("membership notice: ", header.size(), " bytes, expected at least ", kFixedBytes));
  ByteReader r(header);
  uint32_t magic = 0;
  uint16_t version = 0, count = 0;
  MembershipView v;
  r.get(magic);
  r.get(version);
  r.get(count);
  r.get(v.epoch);
  if (magic != kMagic) return Status::invalidArgument(strCat("membership notice: bad magic 0x", std::hex, magic));
  if (version != kVersion)
    return Status::invalidArgument(strCat("membership notice: version ", version, ", expected ", kVersion));
  if (header.size() != kFixedBytes + 4u * count)
    return Status::dataLoss(strCat("membership notice: ", header.size(), " bytes for ", count, " members"));
  if (count == 0) return Status::invalidArgument("membership notice: no members");
  v.members.resize(count);
  for (uint32_t& m : v.members) r.get(m);
  for (size_t i = 0; i < v.members.size(); ++i) {
    if (v.members[i] >= world)
      return Status::invalidArgument(strCat("membership notice: rank ", v.members[i], " of ", world, " nodes"));
    if (i > 0 && v.members[i] <= v.members[i - 1])
      return Status::invalidArgument("membership notice: ranks not ascending");
  }
  return v;
}

Membership::Membership(uint32_t world, uint32_t self, OnPeerLoss policy, double grace_seconds, uint32_t min_nodes)
    : world_(world), self_(self), min_nodes_(min_nodes), policy_(policy), grace_(steadySeconds(grace_seconds)), up_(world, false),
      down_since_(world) {
  for (uint32_t r = 0; r < world; ++r) view_.members.push_back(r);
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

std::optional<MembershipView> Membership::propose(SteadyTime now) const {
  if (policy_ != OnPeerLoss::kShrink || !isMember(self_)) return std::nullopt;
  // The leader: the lowest member this node reaches. Only it proposes.
  for (uint32_t r : view_.members) {
    if (r == self_) break;
    if (up(r)) return std::nullopt;
  }
  MembershipView next{view_.epoch + 1, {}};
  for (uint32_t r = 0; r < world_; ++r) {
    const bool gone = view_.contains(r) && up_[r] && down_since_[r] && now - *down_since_[r] >= grace_;
    const bool back = !view_.contains(r) && up(r);
    if (view_.contains(r) ? !gone : back) next.members.push_back(r);
  }
  if (next.members == view_.members || next.members.size() < std::min(min_nodes_, size())) return std::nullopt;
  return next;
}

std::vector<std::pair<uint32_t, SteadyTime>> Membership::away() const {
  std::vector<std::pair<uint32_t, SteadyTime>> found;
  for (uint32_t r : view_.members)
    if (r != self_ && down_since_[r]) found.emplace_back(r, *down_since_[r]);
  return found;
}

bool Membership::adopt(const MembershipView& view) {
  if (!view.newerThan(view_)) return false;
  view_ = view;
  return true;
}

}  // namespace gcagent::agent

// This node's votes on the next membership view, kept in a file of agent.state_dir so that
// they outlive a restart (membership.h: VoteRecord, VoteKeeping). Each record replaces the
// last one whole: written beside it, synced, renamed over it, and the directory synced, so a
// crash at any moment leaves the old record or the new one, never a mix. The file:
//
//   u32 magic "GCVS" | u16 version | u16 0 | u32 node rank | u32 node count
//   view installed | u32 promised round | u32 promised node
//   u8 accepted (0 or 1) [ u32 round | u32 node | view ]
//   u32 FNV-1a of every byte before it
//   view: u32 epoch | u32 proposer | u32 parent | u16 count, u32 members | u16 count, u32 joined
//
// A file that cannot be read whole, is corrupt or is another node's is an error that names it:
// the agent does not start rather than vote without the promises it made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agent/membership/membership.h"
#include "common/status.h"

namespace gcagent::agent {

inline constexpr const char* kVoteFileName = "membership-votes";

std::vector<std::byte> encodeVoteRecord(const VoteRecord& record, uint32_t self, uint32_t world);
// Checks the length, the checksum, that the record is node `self` of `world`'s, and its views
// (ranks below world, the accepted view following the installed one); the error names the
// field.
Result<VoteRecord> decodeVoteRecord(std::span<const std::byte> bytes, uint32_t self, uint32_t world);
// "installed epoch 2 (nodes 0, 1, 2); promised ballot 3.1; accepted epoch 3 (nodes 0, 1) at ballot 3.1"
std::string describeVotes(const VoteRecord& record);

class VoteStore {
 public:
  // Reads `dir`/membership-votes (none there: nothing kept yet), making `dir` (mode 0700) if
  // it is missing, and checks that the directory takes a file.
  static Result<VoteStore> open(const std::string& dir, uint32_t self, uint32_t world);

  const std::string& path() const { return path_; }
  const std::optional<VoteRecord>& kept() const { return kept_; }
  // Replaces the file with `record`; returns once it is on disk.
  Status save(const VoteRecord& record) const;
  // What Membership keeps its votes with: the record read at open, and save().
  VoteKeeping keeping() const;

 private:
  VoteStore(std::string dir, uint32_t self, uint32_t world);

  std::string dir_, path_;
  uint32_t self_ = 0, world_ = 0;
  std::optional<VoteRecord> kept_;
};

}  // namespace gcagent::agent

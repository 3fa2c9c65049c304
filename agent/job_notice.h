// A notice one agent sends every peer when a job can no longer complete its iteration on
// its node (a trainer of the job left or was killed), so the peers fail that job's
// reductions at once instead of waiting for contributions that will never come. Travels in
// the transport's header field, beside slice headers, told apart by its magic:
//   u32 magic "GCAN" | u16 version | u16 reason length | u64 job | u64 last completed | reason
// The sender's node completed every iteration up to `last_completed` (its contributions and
// results for them are all sent), so a receiver fails only the later ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace gcagent::agent {

struct JobNotice {
  uint64_t job = 0;
  uint64_t last_completed = 0;  // the job's last iteration the sender's node completed, on the wire
  std::string reason;  // why the job failed on the sender's node
  bool operator==(const JobNotice&) const = default;
};

inline constexpr size_t kMaxNoticeReason = 512;

std::vector<std::byte> encodeJobNotice(const JobNotice& notice);  // the reason is cut to kMaxNoticeReason
// Whether `header` starts with the notice magic (and so is not a slice header).
bool isJobNotice(std::span<const std::byte> header);
Result<JobNotice> parseJobNotice(std::span<const std::byte> header);

// A node's frontier for a job (job_alignment.h): it gives up every iteration below `next`
// and completes nothing earlier. Sent when a link comes up, when the node gives an
// iteration up, and in answer to a slice of an iteration it gave up:
//   u32 magic "GCAR" | u16 version | u16 zero | u64 job | u64 next
struct RealignNotice {
  uint64_t job = 0;
  uint64_t next = 0;
  bool operator==(const RealignNotice&) const = default;
};

std::vector<std::byte> encodeRealignNotice(const RealignNotice& notice);
bool isRealignNotice(std::span<const std::byte> header);
Result<RealignNotice> parseRealignNotice(std::span<const std::byte> header);

}  // namespace gcagent::agent

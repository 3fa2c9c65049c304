// A named shared-memory segment in /dev/shm (Boost.Interprocess). The agent creates one per
// trainer, sized from its declared tensors, faulted in at creation so the data path never
// takes a first-touch page fault, and removes it when the trainer goes away; the client
// opens it by name. Access is limited to the owner (mode 0600) unless a mode is given.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace gcagent::shm {

class Segment {
 public:
  // Fails if the name exists, or if /dev/shm lacks the space (a sparse segment would
  // SIGBUS later instead of failing now).
  // `owner`, when given, becomes the segment's owner (an agent running as root serving a
  // trainer of another user); otherwise the agent's user keeps it. `group`, when given,
  // becomes its group (with mode 0660: the members of one group share the agent).
  static Result<Segment> create(const std::string& name, size_t bytes, mode_t mode = 0600,
                                std::optional<uid_t> owner = std::nullopt,
                                std::optional<gid_t> group = std::nullopt);
  static Result<Segment> open(const std::string& name);

  Segment(Segment&&) noexcept;
  Segment& operator=(Segment&&) noexcept;
  ~Segment();

  const std::string& name() const { return name_; }
  std::span<std::byte> bytes() const { return {static_cast<std::byte*>(base_), size_}; }
  bool owner() const { return owner_; }
  // Removes the name now (the owner's segment) and keeps the mapping until destruction: a
  // send may still read it, while a new segment of the same name must be creatable.
  void unlink();
  // A new read-write descriptor of the very segment open() mapped (a duplicate of the one it
  // keeps, not a lookup of the name, which may name another segment by now), for a caller that
  // maps it for itself: its mapping then outlives this object's. The caller closes it.
  Result<int> duplicateDescriptor() const;

 private:
  Segment(std::string name, void* base, size_t size, bool owner, int fd = -1)
      : name_(std::move(name)), base_(base), size_(size), owner_(owner), fd_(fd) {}
  void release();

  std::string name_;
  void* base_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;
  int fd_ = -1;  // kept by open(), for duplicateDescriptor()
};

// A unique segment name for one trainer of one agent: "<prefix>-<agent pid>-<trainer id>".
std::string segmentName(const std::string& prefix, uint32_t trainer_id);

// Removes the segments "<prefix>-<pid>-<id>" whose agent process no longer exists (an agent
// killed with SIGKILL cannot remove its own). Returns the names removed.
std::vector<std::string> removeOrphanSegments(const std::string& prefix);

// Slots for tensors of the given byte sizes, each starting on a 64-byte boundary so no two
// tensors share a cache line. Returns the offsets and, last, the total size.
struct SlotLayout {
  std::vector<uint64_t> offsets;
  uint64_t total_bytes = 0;
};
SlotLayout layoutSlots(std::span<const uint64_t> tensor_bytes);

}  // namespace gcagent::shm

// Error-feedback state per (key, slice): created zeroed on first use, reset when the
// slice's size changes (the tensor was re-declared with another shape), and accounted
// against a byte budget. Not thread-safe: one owner (the agent's comm thread) hands the
// spans to codec workers, and a span stays valid until that key is erased or reset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace gcagent::compress {

class ResidualStore {
 public:
  explicit ResidualStore(size_t budget_bytes = SIZE_MAX) : budget_bytes_(budget_bytes) {}

  // The state of (key, slice) with exactly `elements` floats. A size different from the
  // stored one resets the state to zeros. Fails when the budget would be exceeded.
  Result<std::span<float>> get(uint64_t key, uint32_t slice, size_t elements);

  // The state of (key, slice) if it exists, else an empty span; never allocates.
  std::span<float> find(uint64_t key, uint32_t slice);

  // Drops every slice of a key (its trainer left, or the tensor is gone).
  void erase(uint64_t key);
  // Drops one slice's state: its residual went out with an uncompressed send. A later get()
  // starts from zeros, as a flushed state would.
  void erase(uint64_t key, uint32_t slice);
  void clear();

  size_t bytes() const { return bytes_; }
  size_t slices() const;
  size_t budgetBytes() const { return budget_bytes_; }
  // Number of times a slice's state was reset because its size changed.
  uint64_t resets() const { return resets_; }

 private:
  using Slices = std::unordered_map<uint32_t, std::vector<float>>;
  std::unordered_map<uint64_t, Slices> keys_;
  size_t budget_bytes_;
  size_t bytes_ = 0;
  uint64_t resets_ = 0;
};

}  // namespace gcagent::compress

// How a tensor is cut into slices and which agent owns each slice. Every node must compute
// the same geometry for a key, so it depends only on what all nodes share: the element
// count, the slice size and the partition count of the plan.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gcagent::scheduler {

struct SliceGeometry {
  uint64_t elements = 0;
  uint64_t slice_elements = 1;

  // A tensor split into `partitions` pieces, none larger than `max_slice`: more partitions
  // spread a small tensor over more owners; a large one is cut at max_slice anyway.
  static SliceGeometry of(uint64_t elements, uint64_t max_slice, uint32_t partitions) {
    const uint64_t parts = std::max<uint64_t>(partitions, 1);
    const uint64_t piece = std::max<uint64_t>((elements + parts - 1) / parts, 1);
    return {elements, std::min(max_slice, piece)};
  }

  uint32_t count() const { return static_cast<uint32_t>((elements + slice_elements - 1) / slice_elements); }
  uint64_t begin(uint32_t slice) const { return uint64_t{slice} * slice_elements; }
  uint64_t end(uint32_t slice) const { return std::min(elements, (uint64_t{slice} + 1) * slice_elements); }
  uint64_t size(uint32_t slice) const { return end(slice) - begin(slice); }
};

// Owners are round robin over the nodes, starting at a hash of the key so that small
// tensors (one slice each) spread over the nodes too.
inline uint32_t ownerOf(uint64_t key, uint32_t slice, uint32_t nodes) {
  uint64_t x = key + 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<uint32_t>((x + slice) % nodes);
}

}  // namespace gcagent::scheduler

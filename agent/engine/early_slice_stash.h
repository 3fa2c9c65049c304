// Slices a peer sent before this node knew their job or tensor: the peer's trainers may simply
// have declared first (shims declare tensors as they meet them). They wait here, copied,
// within a byte budget, and are replayed once the job is declared here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"

namespace gcagent::agent {

class EarlySliceStash {
 public:
  struct Slice {
    transport::Rank from;
    std::vector<std::byte> header;
    std::vector<std::byte> payload;
  };

  explicit EarlySliceStash(size_t budget_bytes) : budget_bytes_(budget_bytes) {}

  // Keeps a copy of the message for `job`; false (nothing kept) when the budget is spent.
  bool keep(uint64_t job, const transport::Message& m);
  // Hands back the job's slices in arrival order and forgets them.
  std::vector<Slice> take(uint64_t job);

  size_t bytes() const { return bytes_; }

 private:
  size_t budget_bytes_;
  size_t bytes_ = 0;
  std::unordered_map<uint64_t, std::vector<Slice>> jobs_;
};

}  // namespace gcagent::agent

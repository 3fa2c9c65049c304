#include "agent/engine/early_slice_stash.h"

namespace gcagent::agent {

bool EarlySliceStash::keep(uint64_t job, const transport::Message& m) {
  const size_t size = m.header.size() + m.payload.size();
  if (bytes_ + size > budget_bytes_) return false;
  bytes_ += size;
  jobs_[job].push_back({m.from, {m.header.begin(), m.header.end()}, {m.payload.begin(), m.payload.end()}});
  return true;
}

std::vector<EarlySliceStash::Slice> EarlySliceStash::take(uint64_t job) {
  auto it = jobs_.find(job);
  if (it == jobs_.end()) return {};
  std::vector<Slice> slices = std::move(it->second);
  jobs_.erase(it);
  for (const Slice& s : slices) bytes_ -= s.header.size() + s.payload.size();
  return slices;
}

}  // namespace gcagent::agent

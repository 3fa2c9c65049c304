#include "compress/residual_store.h"

#include "common/str_cat.h"

namespace gcagent::compress {

Result<std::span<float>> ResidualStore::get(uint64_t key, uint32_t slice, size_t elements) {
  std::vector<float>& state = keys_[key][slice];
  if (state.size() == elements) return std::span<float>(state);
  const size_t old_bytes = state.size() * sizeof(float);
  const size_t new_bytes = elements * sizeof(float);
  if (new_bytes > old_bytes && new_bytes - old_bytes > budget_bytes_ - bytes_) {
    if (state.empty()) keys_[key].erase(slice);
    return Status::resourceExhausted(
        strCat("residual store: key ", key, " slice ", slice, " needs ", new_bytes,
               " bytes, but ", bytes_, " of the ", budget_bytes_, "-byte budget are in use"));
  }
  if (!state.empty()) ++resets_;
  // A fresh vector, not resize(): the old values belong to another shape and must not leak.
  std::vector<float>(elements, 0.0f).swap(state);
  bytes_ = bytes_ - old_bytes + new_bytes;
  return std::span<float>(state);
}

std::span<float> ResidualStore::find(uint64_t key, uint32_t slice) {
  auto k = keys_.find(key);
  if (k == keys_.end()) return {};
  auto s = k->second.find(slice);
  return s == k->second.end() ? std::span<float>() : std::span<float>(s->second);
}

void ResidualStore::erase(uint64_t key) {
  auto it = keys_.find(key);
  if (it == keys_.end()) return;
  for (const auto& [slice, state] : it->second) bytes_ -= state.size() * sizeof(float);
  keys_.erase(it);
}

void ResidualStore::erase(uint64_t key, uint32_t slice) {
  auto k = keys_.find(key);
  if (k == keys_.end()) return;
  auto s = k->second.find(slice);
  if (s == k->second.end()) return;
  bytes_ -= s->second.size() * sizeof(float);
  k->second.erase(s);
  if (k->second.empty()) keys_.erase(k);
}

void ResidualStore::clear() {
  keys_.clear();
  bytes_ = 0;
}

size_t ResidualStore::slices() const {
  size_t n = 0;
  for (const auto& [key, slices] : keys_) n += slices.size();
  return n;
}

}  // namespace gcagent::compress

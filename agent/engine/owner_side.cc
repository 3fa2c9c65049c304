#include "agent/engine/owner_side.h"

#include <algorithm>

#include "common/log.h"
#include "common/str_cat.h"
#include "compress/registry.h"

namespace gcagent::agent {
namespace {

// The merges and the result residuals are keyed apart from the node's side.
uint64_t mergeKeyOf(uint64_t key) { return (key * 0x9e3779b97f4a7c15ull) ^ 0x6a09e667f3bcc909ull; }
uint64_t residualKeyOf(uint64_t key, uint32_t slice) {
  return (key * 0x9e3779b97f4a7c15ull) ^ (slice + 0xbb67ae8584caa73bull);
}
// A ring hop's partial sums have a residual apart from the slice's result residual.
uint64_t hopResidualKeyOf(uint64_t key, uint32_t slice) { return residualKeyOf(key, slice) ^ 0x3c6ef372fe94f82bull; }

}  // namespace

struct OwnerSide::Sum {
  std::shared_ptr<float> values;  // in the coder's memory; shared with the merge in flight
  std::vector<uint32_t> order;  // whose contributions, in merge order
  bool final = true;            // the slice's whole sum, not a ring hop's partial sum
  std::vector<bool> seen;  // which nodes' contributions arrived (merged, merging or parked)
  std::map<uint32_t, Contribution> parked;
  uint32_t next = 0;  // the index in `order` of the rank merged next; all before it are in the sum
  uint32_t contributors = 0;
  bool merging = false;  // rank `next`'s contribution is on the stream
  uint64_t serial = 0;   // tells a merge's report from one of an earlier sum of the same id
};

OwnerSide::OwnerSide(uint32_t nodes, std::shared_ptr<LocalCoder> coder, scheduler::Planner& planner,
                     ResidualSampler& sampler, RouteOf route_of, Ready ready, Refused refused)
    : nodes_(nodes), coder_(std::move(coder)), planner_(planner), route_of_(std::move(route_of)),
      ready_(std::move(ready)), refused_(std::move(refused)), sampler_(sampler), alive_(std::make_shared<OwnerSide*>(this)) {
  for (uint32_t r = 0; r < nodes_; ++r) members_.push_back(r);
}

void OwnerSide::setMembers(std::vector<uint32_t> members) {
  sums_.clear();
  members_ = std::move(members);
}

void OwnerSide::forgetResidual(uint64_t job, uint64_t key, uint32_t slice) {
  coder_->forget(job, residualKeyOf(key, slice));
  coder_->forget(job, hopResidualKeyOf(key, slice));
}

void OwnerSide::exportResiduals(uint64_t job, uint64_t key, uint32_t slice_count, Exported done) {
  std::vector<uint64_t> keys;
  for (uint32_t s = 0; s < slice_count; ++s) {
    keys.push_back(residualKeyOf(key, s));
    keys.push_back(hopResidualKeyOf(key, s));
  }
  coder_->exportStates(job, keys, [done = std::move(done)](Result<std::vector<LocalCoder::SliceStates>> states) {
    if (!states.ok()) return done(states.status());
    std::vector<ResidualPart> parts;
    for (size_t i = 0; i < states->size(); ++i) {
      if ((*states)[i].empty() || (*states)[i][0].empty()) continue;
      parts.push_back({i % 2 == 0 ? ResidualKind::kResult : ResidualKind::kHop, static_cast<uint32_t>(i / 2),
                       std::move((*states)[i][0])});
    }
    done(std::move(parts));
  });
}

Status OwnerSide::importResidual(uint64_t job, const TensorRoute& route, const ResidualPart& part) {
  const bool final = part.kind == ResidualKind::kResult;
  const uint64_t n = route.geometry.size(part.slice);
  // The residual's key and work as encode() makes them: the sums of a slice are coded there.
  const uint64_t key = route.spec.key;
  KeyWork work{job,          final ? residualKeyOf(key, part.slice) : hopResidualKeyOf(key, part.slice),
               0,            final ? route.pull_spec : route.push_spec,
               final ? route.pull_spec : route.push_spec,
               {n, n},       {},
               route.priority, nullptr,
               /*renamed=*/true, key, part.slice};
  return coder_->importStates(work, {part.values});
}

Result<std::shared_ptr<float>> OwnerSide::sumBuffer(size_t n) {
  if (coder_->device().hostAddressable()) {  // left uninitialised: the first merge writes it
    auto buffer = std::make_shared<FloatBuffer>(n);
    return std::shared_ptr<float>(buffer, buffer->data());
  }
  GC_ASSIGN_OR_RETURN(void* p, coder_->device().allocateDevice(n * sizeof(float)));
  // Freed once the work that uses it has run; the coder outlives every sum.
  return std::shared_ptr<float>(static_cast<float*>(p), [coder = coder_](float* q) { coder->device().freeDevice(q); });
}

OwnerSide::~OwnerSide() { *alive_ = nullptr; }

void OwnerSide::add(const Slice& s, uint32_t from, Contribution c, Shape shape) {
  TensorRoute* route = route_of_(s.job, s.key);
  if (route == nullptr) return;
  const Id id{s.job, s.key, s.slice, s.iteration};
  Sum& sum = sums_[id];
  if (sum.seen.empty()) {
    sum.seen.assign(nodes_, false);
    sum.serial = ++serials_;
    sum.order = shape.order.empty() ? members_ : std::move(shape.order);
    sum.final = shape.final;
  }
  if (from >= nodes_ || std::find(sum.order.begin(), sum.order.end(), from) == sum.order.end()) {
    const std::string why = strCat("tensor ", s.key, " slice ", s.slice, " iteration ", s.iteration,
                                   ": contribution from rank ", from, ", which does not take part in this sum");
    GC_LOG(kWarn, "agent", why);
    if (sum.next == 0 && sum.parked.empty() && !sum.merging) sums_.erase(id);
    return refused_(why);
  }
  if (sum.seen[from]) {
    const std::string why = strCat("tensor ", s.key, " slice ", s.slice, " iteration ", s.iteration,
                                   ": second contribution from rank ", from, " dropped");
    GC_LOG(kWarn, "agent", why);
    return refused_(why);
  }
  sum.seen[from] = true;
  sum.parked.emplace(from, std::move(c));
  mergeNext(id, sum, *route);
}

void OwnerSide::mergeNext(const Id& id, Sum& sum, const TensorRoute& route) {
  if (sum.merging) return;
  auto waiting = sum.parked.find(sum.order[sum.next]);
  if (waiting == sum.parked.end()) return;
  Contribution c = std::move(waiting->second);
  sum.parked.erase(waiting);
  sum.merging = true;
  const auto& [job, key, slice, iteration] = id;
  const bool first = sum.next == 0;
  const uint64_t n = route.geometry.size(slice);
  auto report = [owner = std::weak_ptr<OwnerSide*>(alive_), id, serial = sum.serial, from = sum.next,
                 contributors = c.contributors, compressed = c.compressed, bytes = c.bytes.size()](
                    double seconds, const Status& s) {
    if (auto o = owner.lock(); o && *o) (*o)->onMerged(id, serial, from, contributors, compressed, bytes, seconds, s);
  };
  if (first) {
    auto values = sumBuffer(n);
    if (!values.ok()) return report(0, values.status());
    sum.values = std::move(values).value();
  }
  // One slice under a key of its own, coded with the contribution's codec (a ring hop's
  // partial sum travels as a contribution too).
  KeyWork work{job,           mergeKeyOf(key), iteration,        route.push_spec, route.push_spec, route.geometry,
               {sum.values.get()}, route.priority, sum.values, /*renamed=*/true, key,          0};
  auto seconds = std::make_shared<double>(0);
  coder_->merge(work, slice, c.compressed, c.bytes, first, seconds.get(),
                [report, seconds](const Status& s) { report(*seconds, s); }, std::move(c.pin));
}

void OwnerSide::onMerged(const Id& id, uint64_t serial, uint32_t from, uint32_t contributors, bool compressed,
                         size_t bytes, double seconds, const Status& status) {
  const auto& [job, key, slice, iteration] = id;
  TensorRoute* route = route_of_(job, key);
  auto found = sums_.find(id);
  // Failed or dropped meanwhile (and perhaps begun again).
  if (route == nullptr || found == sums_.end() || found->second.serial != serial) return;
  Sum& sum = found->second;
  sum.merging = false;
  (compressed ? route->push_stats : route->raw_stats)->decode->Observe(seconds);
  planner_.recordDecode(compressed ? route->push_spec.name : "none", bytes, seconds);
  if (!status.ok()) {
    const uint32_t rank = sum.order[from];
    const std::string why = strCat("contribution from rank ", rank, " for tensor ", key, " slice ", slice,
                                   " rejected: ", status.message());
    GC_LOG(kWarn, "agent", why);
    // Dropped: that rank may still send a valid one; nothing after it is merged before.
    sum.seen[rank] = false;
    if (sum.next == 0 && sum.parked.empty()) sums_.erase(found);
    return refused_(why);
  }
  sum.contributors += contributors;
  ++sum.next;
  if (sum.next == sum.order.size()) return encode(id, sum, *route);
  mergeNext(id, sum, *route);
}

void OwnerSide::encode(const Id& id, Sum& sum, const TensorRoute& route) {
  const auto& [job, key, slice, iteration] = id;
  // The whole sum is the slice's result; a ring hop's partial sum travels as a contribution.
  const bool final = sum.final;
  const bool compressed = final ? route.pullCompressed() : route.pushCompressed();
  const compress::CodecSpec& spec = final ? route.pull_spec : route.push_spec;
  const uint64_t n = route.geometry.size(slice);
  // Sent uncompressed, the sum goes to every node from where it is: the encoding pins it.
  const std::shared_ptr<float> values = sum.values;
  const uint64_t residual_key = final ? residualKeyOf(key, slice) : hopResidualKeyOf(key, slice);
  KeyWork work{job,           residual_key, iteration, spec,          spec,     {n, n},
               {values.get()}, route.priority, values, /*renamed=*/true, key, slice};
  const Slice s{job, key, slice, iteration};
  const uint32_t contributors = sum.contributors;
  sums_.erase(id);
  coder_->encode(work, compressed, {},
                 [owner = std::weak_ptr<OwnerSide*>(alive_), s, compressed, contributors, final](Result<KeyEncodings> r) {
                   if (auto o = owner.lock(); o && *o) (*o)->onEncoded(s, compressed, contributors, final, std::move(r));
                 });
}

void OwnerSide::onEncoded(const Slice& s, bool compressed, uint32_t contributors, bool final,
                          Result<KeyEncodings> encoded) {
  TensorRoute* route = route_of_(s.job, s.key);
  if (route == nullptr) return;
  if (!encoded.ok()) return ready_(s, encoded.status(), compressed, contributors, final);
  if (encoded->slices.size() != 1)
    return ready_(s, Status::internal("the owner's coder returned no result"), compressed, contributors, final);
  SliceEncoding& e = encoded->slices[0];
  compressed = compressed && !e.raw;  // the sum held an inf or a NaN: it goes as it is
  if (compressed) {
    const uint64_t n = route->geometry.size(s.slice);
    metrics::CodecStats& stats = final ? *route->pull_stats : *route->push_stats;
    const compress::CodecSpec& spec = final ? route->pull_spec : route->push_spec;
    const uint64_t residual_key = final ? residualKeyOf(s.key, s.slice) : hopResidualKeyOf(s.key, s.slice);
    stats.encode->Observe(e.seconds);
    planner_.recordEncode(spec.name, n, e.bytes.size(), e.seconds);
    sampler_.encoded(stats, final ? *route->pull : *route->push, coder_->residualOf(s.job, residual_key, 0), n);
  }
  ready_(s, std::move(e), compressed, contributors, final);
}

void OwnerSide::dropSums(uint64_t job, uint64_t key, uint64_t iteration) {
  std::erase_if(sums_, [&](const auto& entry) {
    const auto& [j, k, slice, it] = entry.first;
    return j == job && k == key && it <= iteration;
  });
}

void OwnerSide::dropSums(uint64_t job) {
  std::erase_if(sums_, [&](const auto& entry) { return std::get<0>(entry.first) == job; });
}

void OwnerSide::forget(uint64_t job, uint64_t key, uint32_t slice_count) {
  dropSums(job, key, UINT64_MAX);
  coder_->forget(job, mergeKeyOf(key));
  for (uint32_t s = 0; s < slice_count; ++s) forgetResidual(job, key, s);
}

void OwnerSide::forgetJob(uint64_t job) {
  dropSums(job);
  coder_->forgetJob(job);
}

void OwnerSide::countWaiting(std::vector<double>& per_rank) const {
  for (const auto& [id, sum] : sums_)
    for (uint32_t r : sum.order)
      if (r < per_rank.size() && !sum.seen[r]) per_rank[r] += 1;
}

}  // namespace gcagent::agent

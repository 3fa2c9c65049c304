#include "agent/reduction_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "agent/slice_message.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "compress/registry.h"

namespace gcagent::agent {
namespace {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One residual in this many encodes has its norm computed: a full pass over the slice.
constexpr uint64_t kResidualSampleEvery = 64;

uint32_t fingerprint(const compress::CodecSpec& spec) {
  uint32_t h = 2166136261u;  // FNV-1a over name and sorted parameters
  auto add = [&](std::string_view s) {
    for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 16777619u;
    h = (h ^ 0xff) * 16777619u;
  };
  add(spec.name);
  for (const auto& [k, v] : spec.params) {
    add(k);
    add(v);
  }
  return h;
}

}  // namespace

uint64_t jobIdOf(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

struct ReductionEngine::Accumulator {
  std::vector<float> sum;
  std::vector<bool> seen;  // which nodes contributed
  uint32_t nodes = 0;
  uint32_t contributors = 0;
};

struct ReductionEngine::KeyState {
  TensorSpec spec;
  compress::CodecSpec push_spec, pull_spec;
  std::unique_ptr<compress::Codec> push, pull;
  uint32_t push_fp = 0, pull_fp = 0;
  metrics::CodecStats* push_stats = nullptr;  // cached: no registry lookup per slice
  metrics::CodecStats* pull_stats = nullptr;
  metrics::SizeClass size_class = metrics::SizeClass::kSmall;
  std::chrono::steady_clock::time_point started;
  uint32_t slice_count = 0;
  // This node's reduction in flight.
  bool active = false;
  uint64_t iteration = 0;
  std::vector<float*> outputs;
  uint32_t slices_left = 0;
  std::vector<float> local_sum;
  bool completed_once = false;
  uint64_t last_iteration = 0;  // last iteration this node finished or failed
  // Owner side, by (slice, iteration).
  std::map<std::pair<uint32_t, uint64_t>, Accumulator> accumulators;

  uint64_t begin(uint32_t slice, uint64_t slice_elements) const { return slice * slice_elements; }
  uint64_t end(uint32_t slice, uint64_t slice_elements) const {
    return std::min<uint64_t>(spec.elements, (uint64_t{slice} + 1) * slice_elements);
  }
};

struct ReductionEngine::JobState {
  std::unordered_map<uint64_t, KeyState> keys;
  compress::ResidualStore push_residuals;
  compress::ResidualStore pull_residuals;
  explicit JobState(size_t budget) : push_residuals(budget), pull_residuals(budget) {}
};

ReductionEngine::ReductionEngine(transport::Transport& transport, EngineOptions options, CompleteFn on_complete)
    : transport_(transport), options_(std::move(options)), on_complete_(std::move(on_complete)),
      stats_(options_.stats ? options_.stats : std::make_shared<metrics::Stats>()) {
  for (transport::Rank r = 0; r < transport_.size(); ++r)
    peer_stats_.push_back(r == transport_.rank() ? nullptr : &stats_->peer(r));
}

ReductionEngine::~ReductionEngine() = default;

uint32_t ReductionEngine::ownerOf(uint64_t key, uint32_t slice) const {
  return static_cast<uint32_t>((mix64(key) + slice) % transport_.size());
}

Status ReductionEngine::declareJob(uint64_t job, const std::vector<TensorSpec>& tensors) {
  auto& slot = jobs_[job];
  if (!slot) slot = std::make_unique<JobState>(options_.residual_budget_bytes);
  JobState& js = *slot;
  std::unordered_map<uint64_t, KeyState> keys;
  for (const TensorSpec& t : tensors) {
    KeyState k;
    k.spec = t;
    k.push_spec = t.codec.name.empty() ? options_.default_codec : t.codec;
    if (t.elements < options_.min_elements) {
      // Too small to be worth compressing; a bad codec name is still an error.
      auto requested = compress::makeCodec(k.push_spec, options_.codec_env);
      if (!requested.ok()) return Status::invalidArgument(strCat("tensor ", t.key, ": ", requested.status().message()));
      k.push_spec = {"none", {}};
    }
    k.pull_spec = options_.result_codec == "same" || k.push_spec.name == "none"
                      ? k.push_spec
                      : compress::CodecSpec{options_.result_codec, {}};
    auto push = compress::makeCodec(k.push_spec, options_.codec_env);
    if (!push.ok()) return Status::invalidArgument(strCat("tensor ", t.key, ": ", push.status().message()));
    auto pull = compress::makeCodec(k.pull_spec, options_.codec_env);
    if (!pull.ok()) return Status::invalidArgument(strCat("tensor ", t.key, ": result codec: ", pull.status().message()));
    k.push = std::move(push).value();
    k.pull = std::move(pull).value();
    k.push_stats = &stats_->codec(k.push_spec.name);
    k.pull_stats = &stats_->codec(k.pull_spec.name);
    k.size_class = metrics::sizeClassOf(t.elements * sizeof(float));
    k.push_fp = fingerprint(k.push_spec);
    k.pull_fp = fingerprint(k.pull_spec) ^ 0x5bd1e995u;
    k.slice_count = static_cast<uint32_t>((t.elements + options_.slice_elements - 1) / options_.slice_elements);
    auto old = js.keys.find(t.key);
    if (old != js.keys.end()) {
      if (old->second.active) return Status::failedPrecondition(strCat("tensor ", t.key, " is being reduced"));
      const bool same = old->second.spec.elements == t.elements && old->second.push_fp == k.push_fp;
      if (same) {
        k.completed_once = old->second.completed_once;
        k.last_iteration = old->second.last_iteration;
        k.accumulators = std::move(old->second.accumulators);
      }
    }
    keys.emplace(t.key, std::move(k));
  }
  for (auto& [key, old] : js.keys) {
    auto now = keys.find(key);
    if (now == keys.end() || now->second.spec.elements != old.spec.elements || now->second.push_fp != old.push_fp) {
      js.push_residuals.erase(key);
      js.pull_residuals.erase(key);
    }
  }
  js.keys = std::move(keys);
  // Replay the slices peers sent before this node knew the job.
  auto stashed = stash_.find(job);
  if (stashed != stash_.end()) {
    std::vector<Stashed> replay = std::move(stashed->second);
    stash_.erase(stashed);
    for (const Stashed& s : replay) {
      stash_bytes_ -= s.header.size() + s.payload.size();
      onMessage({s.from, s.header, s.payload});
    }
  }
  return {};
}

void ReductionEngine::dropJob(uint64_t job) {
  failJob(job, Status::failedPrecondition("job dropped"));
  jobs_.erase(job);
}

ReductionEngine::KeyState* ReductionEngine::findKey(uint64_t job, uint64_t key) {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return nullptr;
  auto k = j->second->keys.find(key);
  return k == j->second->keys.end() ? nullptr : &k->second;
}

Status ReductionEngine::reduce(uint64_t job, uint64_t iteration, uint64_t key, std::vector<float*> buffers) {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return Status::failedPrecondition(strCat("job ", job, " is not declared"));
  JobState& js = *j->second;
  auto it = js.keys.find(key);
  if (it == js.keys.end()) return Status::invalidArgument(strCat("tensor ", key, " is not declared"));
  KeyState& k = it->second;
  if (k.active)
    return Status::failedPrecondition(strCat("tensor ", key, " is still reducing iteration ", k.iteration));
  if (k.completed_once && iteration <= k.last_iteration)
    return Status::invalidArgument(strCat("tensor ", key, ": iteration ", iteration, " is not after iteration ",
                                          k.last_iteration));
  if (buffers.empty()) return Status::invalidArgument("no buffers");
  k.active = true;
  k.iteration = iteration;
  k.outputs = std::move(buffers);
  k.slices_left = k.slice_count;
  k.started = Clock::now();
  stats_->decision(k.push_spec.name != "none").Increment();
  const uint64_t n = k.spec.elements;
  if (transport_.size() == 1) {
    // A node on its own: the local sum is the whole sum. One fused pass sums and scales into
    // the first trainer's buffer; the others get a copy.
    if (k.outputs.size() > 1) {
      const float scale = 1.0f / static_cast<float>(k.outputs.size());
      float* out = k.outputs[0];
      for (size_t b = 1; b < k.outputs.size(); ++b) {
        const float* in = k.outputs[b];
        const bool last = b + 1 == k.outputs.size();
        for (uint64_t i = 0; i < n; ++i) out[i] = last ? (out[i] + in[i]) * scale : out[i] + in[i];
      }
      for (size_t b = 1; b < k.outputs.size(); ++b) std::memcpy(k.outputs[b], out, n * sizeof(float));
    }
    completeKey(job, k, {});
    return {};
  }
  const float* src = k.outputs[0];
  if (k.outputs.size() > 1) {
    k.local_sum.assign(k.outputs[0], k.outputs[0] + n);
    for (size_t b = 1; b < k.outputs.size(); ++b) {
      const float* in = k.outputs[b];
      float* acc = k.local_sum.data();
      for (uint64_t i = 0; i < n; ++i) acc[i] += in[i];
    }
    src = k.local_sum.data();
  }
  const uint32_t self = transport_.rank();
  const uint32_t contributors = static_cast<uint32_t>(k.outputs.size());
  for (uint32_t s = 0; s < k.slice_count && k.active; ++s) {
    const uint64_t b = k.begin(s, options_.slice_elements), e = k.end(s, options_.slice_elements);
    const uint32_t owner = ownerOf(key, s);
    if (owner == self) {
      addContribution(js, job, k, s, iteration, self, contributors, src + b, {});
      continue;
    }
    auto residual = js.push_residuals.get(key, s, k.push->stateElements(e - b));
    if (!residual.ok()) {
      completeKey(job, k, residual.status());
      return {};
    }
    auto payload = std::make_shared<std::vector<std::byte>>(k.push->maxEncodedBytes(e - b));
    const auto encode_start = Clock::now();
    auto written = k.push->encode({src + b, e - b}, *residual, *payload, {key, s, iteration});
    if (!written.ok()) {
      completeKey(job, k, written.status());
      return {};
    }
    k.push_stats->encode->Observe(secondsSince(encode_start));
    sampleResidual(*k.push_stats, *k.push, *residual, e - b);
    payload->resize(*written);
    counters_.raw_bytes_sent += (e - b) * 4;
    counters_.wire_bytes_sent += *written;
    k.push_stats->raw_sent->Increment(static_cast<double>((e - b) * 4));
    k.push_stats->wire_sent->Increment(static_cast<double>(*written));
    SliceMessage h{SliceKind::kContribution, job, key, iteration, s, k.slice_count, n, k.push_fp, contributors};
    sendSlice(owner, encodeSliceHeader(h), std::move(payload), job, key);
  }
  return {};
}

void ReductionEngine::addContribution(JobState& js, uint64_t job, KeyState& k, uint32_t slice, uint64_t iteration,
                                      transport::Rank from, uint32_t contributors, const float* local,
                                      std::span<const std::byte> encoded) {
  const uint64_t b = k.begin(slice, options_.slice_elements), e = k.end(slice, options_.slice_elements);
  Accumulator& acc = k.accumulators[{slice, iteration}];
  if (acc.seen.empty()) {
    acc.sum.assign(e - b, 0.0f);
    acc.seen.assign(transport_.size(), false);
  }
  if (acc.seen[from]) {
    badMessage();
    GC_LOG(kWarn, "agent", "tensor ", k.spec.key, " slice ", slice, " iteration ", iteration,
           ": second contribution from rank ", from, " dropped");
    return;
  }
  const auto start = Clock::now();
  if (local != nullptr) {
    for (uint64_t i = 0; i < e - b; ++i) acc.sum[i] += local[i];
    stats_->merge().Observe(secondsSince(start));
  } else {
    Status s = k.push->decodeAdd(encoded, acc.sum, {k.spec.key, slice, iteration});
    k.push_stats->decode->Observe(secondsSince(start));
    if (!s.ok()) {
      badMessage();
      GC_LOG(kWarn, "agent", "contribution from rank ", from, " for tensor ", k.spec.key, " slice ", slice,
             " rejected: ", s.message());
      return;
    }
  }
  acc.seen[from] = true;
  acc.nodes += 1;
  acc.contributors += contributors;
  if (acc.nodes == transport_.size()) finishSlice(job, js, k, slice, iteration);
}

void ReductionEngine::finishSlice(uint64_t job, JobState& js, KeyState& k, uint32_t slice, uint64_t iteration) {
  auto node = k.accumulators.extract({slice, iteration});
  Accumulator& acc = node.mapped();
  const uint64_t key = k.spec.key;
  auto residual = js.pull_residuals.get(key, slice, k.pull->stateElements(acc.sum.size()));
  if (!residual.ok()) {
    if (k.active && k.iteration == iteration) completeKey(job, k, residual.status());
    return;
  }
  auto payload = std::make_shared<std::vector<std::byte>>(k.pull->maxEncodedBytes(acc.sum.size()));
  const auto encode_start = Clock::now();
  auto written = k.pull->encode(acc.sum, *residual, *payload, {key, slice, iteration});
  if (!written.ok()) {
    if (k.active && k.iteration == iteration) completeKey(job, k, written.status());
    return;
  }
  k.pull_stats->encode->Observe(secondsSince(encode_start));
  sampleResidual(*k.pull_stats, *k.pull, *residual, acc.sum.size());
  payload->resize(*written);
  const double peers = transport_.size() - 1;
  k.pull_stats->raw_sent->Increment(peers * static_cast<double>(acc.sum.size() * 4));
  k.pull_stats->wire_sent->Increment(peers * static_cast<double>(*written));
  SliceMessage h{SliceKind::kResult, job, key, iteration, slice, k.slice_count, k.spec.elements, k.pull_fp,
                 acc.contributors};
  const auto header = encodeSliceHeader(h);
  for (transport::Rank r = 0; r < transport_.size(); ++r) {
    if (r == transport_.rank()) continue;
    counters_.raw_bytes_sent += acc.sum.size() * 4;
    counters_.wire_bytes_sent += *written;
    sendSlice(r, header, payload, job, key);
  }
  applyResult(job, k, slice, iteration, acc.contributors, *payload);
}

void ReductionEngine::applyResult(uint64_t job, KeyState& k, uint32_t slice, uint64_t iteration,
                                  uint32_t contributors, std::span<const std::byte> encoded) {
  if (!k.active || k.iteration != iteration) {
    badMessage();
    GC_LOG(kWarn, "agent", "result for tensor ", k.spec.key, " iteration ", iteration, " dropped: the tensor is ",
           k.active ? strCat("at iteration ", k.iteration) : std::string("idle"));
    return;
  }
  const uint64_t b = k.begin(slice, options_.slice_elements), e = k.end(slice, options_.slice_elements);
  float* out = k.outputs[0] + b;
  std::span<float> dst(out, e - b);
  std::fill(dst.begin(), dst.end(), 0.0f);
  const auto decode_start = Clock::now();
  Status s = k.pull->decodeAdd(encoded, dst, {k.spec.key, slice, iteration});
  k.pull_stats->decode->Observe(secondsSince(decode_start));
  if (!s.ok()) {
    badMessage();
    completeKey(job, k, Status::dataLoss(strCat("result of tensor ", k.spec.key, " slice ", slice, ": ", s.message())));
    return;
  }
  const float scale = 1.0f / static_cast<float>(contributors);
  for (float& v : dst) v *= scale;
  for (size_t t = 1; t < k.outputs.size(); ++t) std::memcpy(k.outputs[t] + b, out, (e - b) * sizeof(float));
  if (--k.slices_left == 0) completeKey(job, k, {});
}

void ReductionEngine::completeKey(uint64_t job, KeyState& k, const Status& status) {
  if (!k.active) return;
  k.active = false;
  k.completed_once = true;
  k.last_iteration = k.iteration;
  k.outputs.clear();
  if (status.ok()) {
    ++counters_.keys_completed;
    stats_->tensorsReduced().Increment();
    stats_->reduction(k.size_class).Observe(secondsSince(k.started));
  } else {
    stats_->error(metrics::ErrorKind::kReductionFailed).Increment();
    // Partial sums of the failed iteration must never mix into a later one.
    std::erase_if(k.accumulators, [&](const auto& a) { return a.first.second <= k.iteration; });
  }
  if (on_complete_) on_complete_(job, k.iteration, k.spec.key, status);
}

void ReductionEngine::sendSlice(transport::Rank to, std::vector<std::byte> header,
                                std::shared_ptr<std::vector<std::byte>> payload, uint64_t job, uint64_t key) {
  // The gauge lives in the shared stats, which the callback keeps alive: sends may
  // complete after the engine is gone.
  prometheus::Gauge* inflight = peer_stats_[to] ? peer_stats_[to]->inflight : nullptr;
  if (inflight != nullptr) inflight->Increment();
  Status s = transport_.send(to, header, *payload, [payload, inflight, keep = stats_](const Status&) {
    if (inflight != nullptr) inflight->Decrement();
  });
  if (!s.ok()) {
    KeyState* k = findKey(job, key);
    if (k != nullptr) completeKey(job, *k, Status::unavailable(strCat("sending tensor ", key, " to rank ", to, ": ", s.message())));
  }
}

void ReductionEngine::badMessage() {
  ++counters_.bad_messages;
  stats_->error(metrics::ErrorKind::kBadMessage).Increment();
}

void ReductionEngine::sampleResidual(metrics::CodecStats& cs, const compress::Codec& codec,
                                     std::span<const float> state, size_t n) {
  if (++encodes_ % kResidualSampleEvery != 0) return;
  const std::span<const float> r = codec.residual(state, n);
  if (r.empty()) return;  // stateless codec
  double sum = 0;
  for (float v : r) sum += static_cast<double>(v) * v;
  cs.residual_norm->Set(std::sqrt(sum));
}

void ReductionEngine::reject(const transport::Message& m, const Status& why) {
  badMessage();
  GC_LOG(kWarn, "agent", "slice from rank ", m.from, " rejected: ", why.message());
}

void ReductionEngine::onMessage(const transport::Message& m) {
  auto parsed = parseSliceHeader(m.header);
  if (!parsed.ok()) return reject(m, parsed.status());
  const SliceMessage& h = *parsed;
  // Slices of a job or a tensor not declared here yet wait for the declaration: the peer's
  // trainers may simply have declared first (shims declare tensors as they meet them).
  auto stash = [&](const char* what) {
    const size_t bytes = m.header.size() + m.payload.size();
    if (stash_bytes_ + bytes > options_.stash_budget_bytes)
      return reject(m, Status::resourceExhausted(strCat(what, " is unknown here and the early-slice stash is full")));
    stash_bytes_ += bytes;
    stash_[h.job].push_back({m.from, {m.header.begin(), m.header.end()}, {m.payload.begin(), m.payload.end()}});
  };
  auto j = jobs_.find(h.job);
  if (j == jobs_.end()) return stash(strCat("job ", h.job).c_str());
  JobState& js = *j->second;
  auto it = js.keys.find(h.key);
  if (it == js.keys.end()) return stash(strCat("tensor ", h.key, " of job ", h.job).c_str());
  KeyState& k = it->second;
  if (h.tensor_elements != k.spec.elements || h.slice_count != k.slice_count)
    return reject(m, Status::invalidArgument(strCat("tensor ", h.key, " has ", h.tensor_elements, " elements there, ",
                                                    k.spec.elements, " here")));
  const uint64_t slice_elements = k.end(h.slice, options_.slice_elements) - k.begin(h.slice, options_.slice_elements);
  if (h.kind == SliceKind::kContribution) {
    if (h.codec_fingerprint != k.push_fp)
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, ": codec differs from '", k.push_spec.name, "'")));
    if (ownerOf(h.key, h.slice) != transport_.rank())
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, " is not owned here")));
    if (k.completed_once && h.iteration <= k.last_iteration && !(k.active && h.iteration == k.iteration))
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, ": contribution for finished iteration ",
                                                      h.iteration)));
    counters_.raw_bytes_received += slice_elements * 4;
    counters_.wire_bytes_received += m.payload.size();
    k.push_stats->raw_received->Increment(static_cast<double>(slice_elements * 4));
    k.push_stats->wire_received->Increment(static_cast<double>(m.payload.size()));
    addContribution(js, h.job, k, h.slice, h.iteration, m.from, h.contributors, nullptr, m.payload);
  } else {
    if (h.codec_fingerprint != k.pull_fp)
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, ": result codec differs from '",
                                                      k.pull_spec.name, "'")));
    if (ownerOf(h.key, h.slice) != m.from)
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, ": result from rank ",
                                                      m.from, ", which does not own it")));
    counters_.raw_bytes_received += slice_elements * 4;
    counters_.wire_bytes_received += m.payload.size();
    k.pull_stats->raw_received->Increment(static_cast<double>(slice_elements * 4));
    k.pull_stats->wire_received->Increment(static_cast<double>(m.payload.size()));
    applyResult(h.job, k, h.slice, h.iteration, h.contributors, m.payload);
  }
}

void ReductionEngine::onPeerDown(transport::Rank peer, const Status& why) {
  stats_->error(why.code() == StatusCode::kDeadlineExceeded ? metrics::ErrorKind::kTimeout
                                                            : metrics::ErrorKind::kPeerLost)
      .Increment();
  const Status status = Status::unavailable(strCat("peer rank ", peer, " lost: ", why.message()));
  for (auto& [job, js] : jobs_) failJob(job, status);
}

void ReductionEngine::failJob(uint64_t job, const Status& why) {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return;
  for (auto& [key, k] : j->second->keys) {
    completeKey(job, k, why);
    k.accumulators.clear();  // partial sums that can no longer complete
  }
}

void ReductionEngine::refreshStats() {
  std::vector<double> waiting(transport_.size(), 0.0);
  for (const auto& [job, js] : jobs_)
    for (const auto& [key, k] : js->keys)
      for (const auto& [id, acc] : k.accumulators)
        for (transport::Rank r = 0; r < acc.seen.size() && r < waiting.size(); ++r)
          if (!acc.seen[r]) waiting[r] += 1;
  for (transport::Rank r = 0; r < transport_.size(); ++r)
    if (peer_stats_[r] != nullptr) peer_stats_[r]->queue_depth->Set(waiting[r]);
}

size_t ReductionEngine::pendingAccumulators() const {
  size_t n = 0;
  for (const auto& [job, js] : jobs_)
    for (const auto& [key, k] : js->keys) n += k.accumulators.size();
  return n;
}

}  // namespace gcagent::agent

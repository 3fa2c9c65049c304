#include "agent/reduction_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "agent/host_coder_device.h"
#include "agent/silent_codec_watch.h"
#include "agent/slice_math.h"
#include "agent/slice_message.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "compress/registry.h"
#include "scheduler/send_lane.h"

namespace gcagent::agent {
namespace {

// One residual in this many encodes has its norm computed: a full pass over the slice.
constexpr uint64_t kResidualSampleEvery = 64;
// Marks result fingerprints, so a contribution is never mistaken for a result.
constexpr uint32_t kResultMark = 0x5bd1e995u;
// Marks the contributions of tensors under the mxnet policy: nodes that disagree on the
// policy would sum differently, so their slices are refused like a codec mismatch.
constexpr uint32_t kMxnetMark = 0x2545f491u;

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

// A contribution that arrived before its turn. Contributions are summed in rank order, so
// the sum has the same bits whatever order the network delivers them in.
struct ParkedContribution {
  // A peer's bytes are copied (the message is gone after onMessage); this node's own share
  // is pinned where its coder left it.
  std::shared_ptr<const void> pin;
  std::span<const std::byte> bytes;
  bool compressed = false;
  uint32_t contributors = 0;
};

// One slice's sum at its owner. Contributions are decoded into it on the host stream, one at
// a time in rank order, at the tensor's priority: the stream takes the most urgent first.
struct ReductionEngine::Accumulator {
  std::shared_ptr<FloatBuffer> sum = std::make_shared<FloatBuffer>();  // shared with the merge in flight
  std::vector<bool> seen;  // which nodes' contributions arrived (merged, merging or parked)
  std::map<transport::Rank, ParkedContribution> parked;
  transport::Rank next = 0;  // the rank merged next; all below it are in the sum
  uint32_t contributors = 0;
  bool merging = false;  // rank `next`'s contribution is on the host stream
};

namespace {

// The owner's stream work and its result residuals are keyed apart from the node's side.
constexpr uint64_t kMergeTag = 0x6a09e667f3bcc909ull;
uint64_t ownerKeyOf(uint64_t key, uint32_t slice) { return (key * 0x9e3779b97f4a7c15ull) ^ (slice + 0xbb67ae8584caa73bull); }

}  // namespace

namespace {

bool isMxnet(const TensorSpec& t) { return t.policy.aggregation == Aggregation::kMxnet; }

// What the result is divided by: the number of trainers for an average, 1 for a sum.
float divisorOf(const TensorSpec& t, uint32_t contributors) {
  return t.policy.result == ResultKind::kSum ? 1.0f : static_cast<float>(contributors);
}

}  // namespace

struct ReductionEngine::KeyState {
  TensorSpec spec;
  compress::CodecSpec push_spec, pull_spec;
  std::shared_ptr<const compress::Codec> push, pull;  // shared with the merges in flight
  uint32_t push_fp = 0, pull_fp = 0;
  metrics::CodecStats* push_stats = nullptr;  // cached: no registry lookup per slice
  metrics::CodecStats* pull_stats = nullptr;
  metrics::CodecStats* raw_stats = nullptr;
  metrics::SizeClass size_class = metrics::SizeClass::kSmall;
  SteadyTime started;
  scheduler::SliceGeometry geometry;
  uint32_t slice_count = 0;
  // The planner's decision: compressed or not, re-made when the planner re-fits.
  scheduler::Plan plan;
  uint64_t plan_epoch = UINT64_MAX;
  bool planned = false;
  // This node's reduction in flight.
  bool active = false;
  uint64_t iteration = 0;
  std::vector<float*> outputs;
  uint32_t slices_left = 0;
  uint32_t contributors = 0;
  bool completed_once = false;
  uint64_t last_iteration = 0;  // last iteration this node finished or failed
  // Owner side, by (slice, iteration).
  std::map<std::pair<uint32_t, uint64_t>, Accumulator> accumulators;
  // The coder of the node's side (the host's, or a GPU's): it keeps this key's residuals.
  std::shared_ptr<LocalCoder> coder;
  KeyWork work;  // what the coder is told, while active
  SilentCodecWatch silent;  // the push codec sending nothing but zeros
};

// Bytes handed to the transport and what keeps them alive until it is done with them: an
// encoding, or for an uncompressed slice the memory it lives in (the node's sum, an owner's
// sum, a trainer's segment), sent without a copy.
struct ReductionEngine::Payload {
  std::shared_ptr<const void> pin;
  std::span<const std::byte> bytes;
};


// A slice waiting for its peer's credit window: its header and its bytes, pinned. A result
// was encoded once by the owner and is shared by the sends to every node.
struct ReductionEngine::Outgoing {
  SliceKind kind;
  uint64_t job, key, iteration;
  uint32_t slice;
  std::vector<std::byte> header;
  Payload payload;
};

struct ReductionEngine::Lane : scheduler::SendLane<Outgoing> {
  using SendLane::SendLane;
  bool dispatching = false;  // a completion during a send: dispatch()'s loop goes on
};

struct ReductionEngine::JobState {
  std::unordered_map<uint64_t, KeyState> keys;
};

ReductionEngine::ReductionEngine(transport::Transport& transport, EngineOptions options, CompleteFn on_complete)
    : transport_(transport), options_(std::move(options)), on_complete_(std::move(on_complete)),
      stash_(options_.stash_budget_bytes),
      stats_(options_.stats ? options_.stats : std::make_shared<metrics::Stats>()),
      planner_({options_.selection, options_.min_elements, transport_.size(), options_.slice_elements,
                options_.refit_interval}),
      alive_(std::make_shared<ReductionEngine*>(this)) {
  for (transport::Rank r = 0; r < transport_.size(); ++r) {
    const bool self = r == transport_.rank();
    peer_stats_.push_back(self ? nullptr : &stats_->peer(r));
    lanes_.push_back(self ? nullptr : std::make_unique<Lane>(options_.inflight_per_peer, options_.inflight_bytes));
  }
  raw_codec_ = std::move(compress::makeCodec({"none", {}}, options_.codec_env)).value();
  raw_fp_ = fingerprint({"none", {}});
  if (options_.host_stream) {
    const auto budget = options_.residual_budget_bytes;
    host_coder_ = std::make_shared<LocalCoder>(makeHostCoderDevice(options_.host_stream, options_.codec_env), budget);
    owner_coder_ = std::make_shared<LocalCoder>(makeHostCoderDevice(options_.host_stream, options_.codec_env), budget);
  }
}

ReductionEngine::~ReductionEngine() { *alive_ = nullptr; }

uint32_t ReductionEngine::ownerOf(uint64_t key, uint32_t slice) const {
  return scheduler::ownerOf(key, slice, transport_.size());
}

size_t ReductionEngine::queuedSlices(transport::Rank peer) const {
  return peer < lanes_.size() && lanes_[peer] ? lanes_[peer]->queued() : 0;
}

Result<scheduler::Plan> ReductionEngine::planOf(uint64_t job, uint64_t key) const {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return Status::notFound(strCat("job ", job, " is not declared"));
  auto k = j->second->keys.find(key);
  if (k == j->second->keys.end()) return Status::notFound(strCat("tensor ", key, " is not declared"));
  return k->second.plan;
}

bool ReductionEngine::codesOnDevice(uint64_t job, uint64_t key) const {
  if (transport_.size() == 1) return true;
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return false;
  auto k = j->second->keys.find(key);
  if (k == j->second->keys.end()) return false;
  const auto& staged = options_.gpu_staged_codecs;
  return std::find(staged.begin(), staged.end(), k->second.push_spec.name) == staged.end();
}

void ReductionEngine::replan(KeyState& k, bool log_always) {
  scheduler::Plan plan = planner_.decide(k.spec.elements, *k.push);
  // MXNet compresses every dense fp32 key, whatever its size.
  if (isMxnet(k.spec)) plan.compress = true;
  const bool changed = !k.planned || plan.compress != k.plan.compress;
  k.plan = plan;
  k.plan.partitions = k.geometry.count() < plan.partitions ? k.geometry.count() : plan.partitions;
  k.plan_epoch = planner_.epoch();
  k.planned = true;
  if (!(changed || log_always) || k.push_spec.name == "none") return;
  std::string why;
  if (isMxnet(k.spec)) {
    why = "compressed (aggregation mxnet compresses every key)";
  } else if (planner_.selection() == scheduler::Selection::kAuto) {
    why = k.plan.describe();
  } else {
    why = strCat(k.plan.compress ? "compressed" : "uncompressed", " (min_elements ", options_.min_elements, ")");
  }
  GC_LOG(kInfo, "scheduler", "tensor ", k.spec.key, " (", k.spec.elements, " elements, ", k.push_spec.name, ", ",
         describe(k.spec.policy), "): ", why);
}

void ReductionEngine::updatePlanGauges() {
  double compressed = 0, uncompressed = 0;
  for (const auto& [job, js] : jobs_)
    for (const auto& [key, k] : js->keys) (k.plan.compress ? compressed : uncompressed) += 1;
  stats_->gauge(metrics::Id::planned_tensors, {"compressed"}).Set(compressed);
  stats_->gauge(metrics::Id::planned_tensors, {"uncompressed"}).Set(uncompressed);
}

Status ReductionEngine::declareJob(uint64_t job, const std::vector<TensorSpec>& tensors) {
  auto& slot = jobs_[job];
  if (!slot) slot = std::make_unique<JobState>();
  JobState& js = *slot;
  std::unordered_map<uint64_t, KeyState> keys;
  for (const TensorSpec& t : tensors) {
    KeyState k;
    k.spec = t;
    k.push_spec = t.codec.name.empty() ? options_.default_codec : t.codec;
    // Whether a tensor is worth compressing is the planner's call (per reduction); the pull
    // codec of an uncompressed push codec stays uncompressed, and so does every result
    // under the mxnet policy.
    if (isMxnet(t) || k.push_spec.name == "none") {
      k.pull_spec = {"none", {}};
    } else {
      k.pull_spec = options_.result_codec == "same" ? k.push_spec : compress::CodecSpec{options_.result_codec, {}};
    }
    auto push = compress::makeCodec(k.push_spec, options_.codec_env);
    if (!push.ok()) return Status::invalidArgument(strCat("tensor ", t.key, ": ", push.status().message()));
    auto pull = compress::makeCodec(k.pull_spec, options_.codec_env);
    if (!pull.ok()) return Status::invalidArgument(strCat("tensor ", t.key, ": result codec: ", pull.status().message()));
    k.push = std::move(push).value();
    k.pull = std::move(pull).value();
    k.push_stats = &stats_->codec(k.push_spec.name);
    k.pull_stats = &stats_->codec(k.pull_spec.name);
    k.raw_stats = &stats_->codec("none");
    k.size_class = metrics::sizeClassOf(t.elements * sizeof(float));
    k.push_fp = fingerprint(k.push_spec) ^ (isMxnet(t) ? kMxnetMark : 0u);
    k.pull_fp = fingerprint(k.pull_spec) ^ kResultMark;
    k.geometry = scheduler::SliceGeometry::of(t.elements, options_.slice_elements, planner_.partitions(t.elements));
    k.slice_count = k.geometry.count();
    auto old = js.keys.find(t.key);
    if (old != js.keys.end()) {
      if (old->second.active) return Status::failedPrecondition(strCat("tensor ", t.key, " is being reduced"));
      const bool same = old->second.spec.elements == t.elements && old->second.push_fp == k.push_fp;
      if (same) {
        k.completed_once = old->second.completed_once;
        k.last_iteration = old->second.last_iteration;
        k.accumulators = std::move(old->second.accumulators);
        k.coder = old->second.coder;
      }
    }
    keys.emplace(t.key, std::move(k));
  }
  for (auto& [key, old] : js.keys) {
    auto now = keys.find(key);
    if (now == keys.end() || now->second.spec.elements != old.spec.elements || now->second.push_fp != old.push_fp) {
      for (uint32_t s = 0; s < old.slice_count; ++s) owner_coder_->forget(job, ownerKeyOf(key, s));
      if (old.coder) old.coder->forget(job, key);
    }
  }
  js.keys = std::move(keys);
  for (auto& [key, k] : js.keys) replan(k, /*log_always=*/true);
  updatePlanGauges();
  // Replay the slices peers sent before this node knew the job.
  for (const EarlySliceStash::Slice& s : stash_.take(job)) onMessage({s.from, s.header, s.payload});
  return {};
}

void ReductionEngine::dropJob(uint64_t job) {
  failJob(job, Status::failedPrecondition("job dropped"));
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return;
  std::vector<LocalCoder*> coders;
  for (auto& [key, k] : j->second->keys)
    if (k.coder && std::find(coders.begin(), coders.end(), k.coder.get()) == coders.end()) coders.push_back(k.coder.get());
  for (LocalCoder* c : coders) c->forgetJob(job);
  owner_coder_->forgetJob(job);
  jobs_.erase(j);
}

ReductionEngine::KeyState* ReductionEngine::findKey(uint64_t job, uint64_t key) {
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return nullptr;
  auto k = j->second->keys.find(key);
  return k == j->second->keys.end() ? nullptr : &k->second;
}

Status ReductionEngine::reduce(uint64_t job, uint64_t iteration, uint64_t key, std::vector<float*> buffers,
                               std::shared_ptr<LocalCoder> coder, std::shared_ptr<const void> keepalive) {
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
  k.started = options_.now();
  if (planner_.maybeRefit(k.started)) updateCostGauges();
  if (k.plan_epoch != planner_.epoch()) {
    const bool before = k.plan.compress;
    replan(k, /*log_always=*/false);
    if (before != k.plan.compress) updatePlanGauges();
  }
  const bool compressed = k.plan.compress && k.push_spec.name != "none";
  stats_->decision(compressed).Increment();
  // Under mxnet a node's own share is encoded like every other node's; otherwise the owner
  // adds it exactly. A lone node then still encodes and decodes, as a one-worker dist_sync.
  const bool own_share_encoded = isMxnet(k.spec) && compressed;
  const bool alone = transport_.size() == 1 && !own_share_encoded;
  k.contributors = static_cast<uint32_t>(k.outputs.size());
  // The node's side runs where the gradients are: on their GPU's coder, else the host's.
  const bool on_host = coder == nullptr;
  if (on_host) coder = host_coder_;
  if (!coder) return Status::internal("the engine has no host coder");
  if (k.coder && k.coder != coder) k.coder->forget(job, key);  // its residuals stay behind otherwise
  k.coder = std::move(coder);
  k.work = {job,    key, iteration, k.push_spec, k.pull_spec, k.geometry, k.outputs, k.spec.priority,
            on_host ? std::move(keepalive) : nullptr, /*renamed=*/false, 0, 0};
  auto engine = std::weak_ptr<ReductionEngine*>(alive_);
  if (alone) {
    k.coder->sum(k.work, divisorOf(k.spec, k.contributors), [engine, job, key, iteration](const Status& s) {
      if (auto e = engine.lock(); e && *e) (*e)->onCoded(job, key, iteration, s);
    });
    return {};
  }
  // The slices this node owns go exact unless its own share is encoded (mxnet).
  std::vector<bool> own(k.slice_count);
  for (uint32_t s = 0; s < k.slice_count; ++s) own[s] = !own_share_encoded && ownerOf(key, s) == transport_.rank();
  k.coder->encode(k.work, compressed, own, [engine, job, key, iteration, compressed](Result<KeyEncodings> r) {
    if (auto e = engine.lock(); e && *e) (*e)->onEncoded(job, key, iteration, compressed, std::move(r));
  });
  return {};
}

void ReductionEngine::enqueue(transport::Rank to, int32_t priority, Outgoing item) {
  lanes_[to]->push(priority, std::move(item));
}

void ReductionEngine::dispatch(transport::Rank to) {
  Lane& lane = *lanes_[to];
  if (lane.dispatching) return;  // a completion during a send: the loop below goes on
  lane.dispatching = true;
  while (const Outgoing* queued = lane.next()) {
    const Outgoing& next = *queued;
    if (!lane.admits(next.payload.bytes.size())) break;
    Outgoing item = lane.pop();
    KeyState* k = findKey(item.job, item.key);
    Payload payload = std::move(item.payload);
    std::vector<std::byte> header = std::move(item.header);
    if (item.kind == SliceKind::kContribution) {
      // A reduction that failed meanwhile leaves its queued slices behind: drop them.
      if (k == nullptr || !k->active || k->iteration != item.iteration) continue;
    }
    const uint64_t bytes = payload.bytes.size();
    lane.take(bytes);
    // The gauge lives in the shared stats, which the callback keeps alive: sends may
    // complete after the engine is gone.
    prometheus::Gauge* inflight = peer_stats_[to]->inflight;
    inflight->Increment();
    const auto handed = options_.now();
    Status s = transport_.send(to, header, payload.bytes,
                               [pin = payload.pin, inflight, bytes, handed, to, keep = stats_,
                                engine = std::weak_ptr<ReductionEngine*>(alive_)](const Status& done) {
                                 inflight->Decrement();
                                 if (auto e = engine.lock(); e && *e) (*e)->onSent(to, bytes, handed, done);
                               });
    if (!s.ok()) {
      lane.refund(bytes);
      inflight->Decrement();
      if (k != nullptr && k->active && k->iteration == item.iteration)
        completeKey(item.job, *k, Status::unavailable(strCat("sending tensor ", item.key, " to rank ", to, ": ",
                                                             s.message())));
    }
  }
  lane.dispatching = false;
}

void ReductionEngine::onSent(transport::Rank to, uint64_t bytes, SteadyTime handed, const Status& s) {
  if (auto took = lanes_[to]->complete(bytes, handed, options_.now(), s.ok())) planner_.recordWire(bytes, *took);
  dispatch(to);
}

void ReductionEngine::countSent(metrics::CodecStats& stats, uint64_t raw, uint64_t wire, uint32_t copies) {
  counters_.raw_bytes_sent += copies * raw;
  counters_.wire_bytes_sent += copies * wire;
  stats.raw_sent->Increment(static_cast<double>(copies * raw));
  stats.wire_sent->Increment(static_cast<double>(copies * wire));
}

void ReductionEngine::addContribution(uint64_t job, KeyState& k, uint32_t slice, uint64_t iteration,
                                      transport::Rank from, ParkedContribution contribution) {
  Accumulator& acc = k.accumulators[{slice, iteration}];
  if (acc.seen.empty()) acc.seen.assign(transport_.size(), false);
  if (acc.seen[from]) {
    const std::string why = strCat("tensor ", k.spec.key, " slice ", slice, " iteration ", iteration,
                                   ": second contribution from rank ", from, " dropped");
    badMessage(why);
    GC_LOG(kWarn, "agent", why);
    return;
  }
  acc.seen[from] = true;
  acc.parked.emplace(from, std::move(contribution));
  mergeNext(job, k, slice, iteration);
}

void ReductionEngine::mergeNext(uint64_t job, KeyState& k, uint32_t slice, uint64_t iteration) {
  Accumulator& acc = k.accumulators.at({slice, iteration});
  if (acc.merging) return;
  auto waiting = acc.parked.find(acc.next);
  if (waiting == acc.parked.end()) return;
  ParkedContribution c = std::move(waiting->second);
  acc.parked.erase(waiting);
  acc.merging = true;
  const bool first = acc.next == 0;
  if (first) acc.sum->resize(k.geometry.size(slice));  // left uninitialised: the first decode writes it
  std::shared_ptr<const compress::Codec> codec = c.compressed ? k.push : raw_codec_;
  auto seconds = std::make_shared<double>(0);
  const compress::SliceId id{k.spec.key, slice, iteration};
  const uint64_t tag = (job * 0x9e3779b97f4a7c15ull ^ k.spec.key) ^ kMergeTag;
  HostStream& stream = *options_.host_stream;
  stream.enqueue(tag, k.spec.priority, [codec, sum = acc.sum, c, first, id, seconds]() -> Status {
    const auto start = std::chrono::steady_clock::now();
    Status s = first ? codec->decode(c.bytes, *sum, 1.0f, id) : codec->decodeAdd(c.bytes, *sum, id);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return s;
  });
  stream.after(tag, k.spec.priority,
               [engine = std::weak_ptr<ReductionEngine*>(alive_), job, key = k.spec.key, slice, iteration,
                from = acc.next, contributors = c.contributors, compressed = c.compressed, codec, bytes = c.bytes.size(),
                seconds](const Status& s) {
                 if (auto e = engine.lock(); e && *e)
                   (*e)->onMerged(job, key, slice, iteration, from, contributors, compressed, *codec, bytes, *seconds, s);
               });
}

void ReductionEngine::onMerged(uint64_t job, uint64_t key, uint32_t slice, uint64_t iteration, transport::Rank from,
                               uint32_t contributors, bool compressed, const compress::Codec& codec, size_t bytes,
                               double seconds, const Status& status) {
  KeyState* k = findKey(job, key);
  if (k == nullptr) return;
  auto found = k->accumulators.find({slice, iteration});
  if (found == k->accumulators.end()) return;  // failed meanwhile
  Accumulator& acc = found->second;
  acc.merging = false;
  (compressed ? k->push_stats : k->raw_stats)->decode->Observe(seconds);
  planner_.recordDecode(codec.name(), bytes, seconds);
  if (!status.ok()) {
    const std::string why = strCat("contribution from rank ", from, " for tensor ", key, " slice ", slice,
                                   " rejected: ", status.message());
    badMessage(why);
    GC_LOG(kWarn, "agent", why);
    // Dropped: that rank may still send a valid one; nothing after it is merged before.
    acc.seen[from] = false;
    if (acc.next == 0 && acc.parked.empty()) k->accumulators.erase(found);
    return;
  }
  acc.contributors += contributors;
  ++acc.next;
  if (acc.next == transport_.size()) return finishSlice(job, *k, slice, iteration);
  mergeNext(job, *k, slice, iteration);
}

void ReductionEngine::finishSlice(uint64_t job, KeyState& k, uint32_t slice, uint64_t iteration) {
  auto node = k.accumulators.extract({slice, iteration});
  Accumulator& acc = node.mapped();
  const bool compressed = k.plan.compress && k.pull_spec.name != "none";
  // The sum is encoded with the owner's residual of the slice, on the host stream; sent
  // uncompressed, it goes to every node from where it is (the encoding pins it).
  const uint64_t n = k.geometry.size(slice);
  const std::shared_ptr<FloatBuffer> sum = acc.sum;
  KeyWork work{job,    ownerKeyOf(k.spec.key, slice), iteration, k.pull_spec, k.pull_spec, {n, n}, {sum->data()},
               k.spec.priority, sum, /*renamed=*/true, k.spec.key, slice};
  owner_coder_->encode(work, compressed, {},
                       [engine = std::weak_ptr<ReductionEngine*>(alive_), job, key = k.spec.key, slice, iteration,
                        compressed, contributors = acc.contributors](Result<KeyEncodings> r) {
                         if (auto e = engine.lock(); e && *e)
                           (*e)->onResultEncoded(job, key, slice, iteration, compressed, contributors, std::move(r));
                       });
}

void ReductionEngine::onResultEncoded(uint64_t job, uint64_t key, uint32_t slice, uint64_t iteration, bool compressed,
                                      uint32_t contributors, Result<KeyEncodings> encoded) {
  KeyState* k = findKey(job, key);
  if (k == nullptr) return;
  if (!encoded.ok() || encoded->slices.size() != 1) {
    const Status why = encoded.ok() ? Status::internal("the owner's coder returned no result") : encoded.status();
    if (k->active && k->iteration == iteration) completeKey(job, *k, why);
    return;
  }
  SliceEncoding& e = encoded->slices[0];
  const uint64_t n = k->geometry.size(slice);
  metrics::CodecStats& cs = compressed ? *k->pull_stats : *k->raw_stats;
  if (compressed) {
    cs.encode->Observe(e.seconds);
    planner_.recordEncode(k->pull_spec.name, n, e.bytes.size(), e.seconds);
    sampleResidual(cs, *k->pull, owner_coder_->residualOf(job, ownerKeyOf(key, slice), 0), n);
  }
  countSent(cs, n * sizeof(float), e.bytes.size(), transport_.size() - 1);
  const Payload payload{std::move(e.pin), e.bytes};
  SliceMessage h{SliceKind::kResult, job, key, iteration, slice, k->slice_count, k->spec.elements,
                 compressed ? k->pull_fp : raw_fp_ ^ kResultMark, contributors};
  const auto header = encodeSliceHeader(h);
  for (transport::Rank r = 0; r < transport_.size(); ++r) {
    if (r == transport_.rank()) continue;
    enqueue(r, k->spec.priority, Outgoing{SliceKind::kResult, job, key, iteration, slice, header, payload});
    dispatch(r);
  }
  applyResult(job, *k, slice, iteration, contributors, payload.bytes, compressed);
}

void ReductionEngine::applyResult(uint64_t job, KeyState& k, uint32_t slice, uint64_t iteration,
                                  uint32_t contributors, std::span<const std::byte> encoded, bool compressed) {
  if (!k.active || k.iteration != iteration) {
    const std::string why = strCat("result for tensor ", k.spec.key, " iteration ", iteration, " dropped: the tensor is ",
                                   k.active ? strCat("at iteration ", k.iteration) : std::string("idle"));
    badMessage(why);
    GC_LOG(kWarn, "agent", why);
    return;
  }
  const float divisor = divisorOf(k.spec, contributors);
  if (!k.coder->device().hostAddressable()) stats_->gpuCopy(false).Increment(static_cast<double>(encoded.size()));
  // The coder runs a key's decodes in order: only the last one reports, for all of them.
  if (--k.slices_left > 0) return k.coder->decodeResult(k.work, slice, compressed, encoded, divisor, {});
  auto engine = std::weak_ptr<ReductionEngine*>(alive_);
  k.coder->decodeResult(k.work, slice, compressed, encoded, divisor,
                        [engine, job, key = k.spec.key, iteration](const Status& s) {
                          if (auto e = engine.lock(); e && *e) (*e)->onCoded(job, key, iteration, s);
                        });
}

void ReductionEngine::completeKey(uint64_t job, KeyState& k, const Status& status) {
  if (!k.active) return;
  k.active = false;
  k.completed_once = true;
  k.last_iteration = k.iteration;
  k.outputs.clear();
  k.work.buffers.clear();
  k.work.keepalive.reset();  // the coder's queued work and the sends in flight hold their own
  if (status.ok()) {
    ++counters_.keys_completed;
    stats_->tensorsReduced().Increment();
    stats_->reduction(k.size_class).Observe(secondsBetween(k.started, options_.now()));
  } else {
    stats_->recordError(metrics::ErrorKind::kReductionFailed, strCat("tensor ", k.spec.key, ": ", status.message()));
    // Partial sums of the failed iteration must never mix into a later one.
    std::erase_if(k.accumulators, [&](const auto& a) { return a.first.second <= k.iteration; });
  }
  if (on_complete_) on_complete_(job, k.iteration, k.spec.key, status);
}

void ReductionEngine::onEncoded(uint64_t job, uint64_t key, uint64_t iteration, bool compressed,
                                Result<KeyEncodings> encoded) {
  KeyState* k = findKey(job, key);
  if (k == nullptr || !k->active || k->iteration != iteration) return;  // failed meanwhile
  if (!encoded.ok()) return completeKey(job, *k, encoded.status());
  std::vector<SliceEncoding>& encodings = encoded->slices;
  if (encodings.size() != k->slice_count)
    return completeKey(job, *k, Status::internal(strCat("the coder returned ", encodings.size(), " slices of ",
                                                        k->slice_count)));
  const bool on_host = k->coder->device().hostAddressable();
  if (!on_host) {
    uint64_t to_host = 0;
    for (const SliceEncoding& e : encodings) to_host += e.bytes.size();
    stats_->gpuCopy(true).Increment(static_cast<double>(to_host));
  }
  if (on_host && k->outputs.size() > 1) stats_->merge().Observe(encoded->sum_seconds);
  if (compressed && on_host) observeEncodings(*k, iteration, encodings);
  metrics::CodecStats& cs = compressed ? *k->push_stats : *k->raw_stats;
  const uint32_t fp = compressed ? k->push_fp : raw_fp_;
  const uint32_t self = transport_.rank();
  std::vector<bool> touched(transport_.size(), false);
  for (uint32_t s = 0; s < k->slice_count && k->active && k->iteration == iteration; ++s) {
    SliceEncoding& e = encodings[s];
    const uint32_t owner = ownerOf(key, s);
    if (owner == self) {
      // This node's own contribution: exact, or encoded under mxnet.
      addContribution(job, *k, s, iteration, self,
                      {std::move(e.pin), e.bytes, compressed && isMxnet(k->spec), k->contributors});
      continue;
    }
    countSent(cs, k->geometry.size(s) * sizeof(float), e.bytes.size(), 1);
    SliceMessage h{SliceKind::kContribution, job, key, iteration, s, k->slice_count, k->spec.elements, fp,
                   k->contributors};
    enqueue(owner, k->spec.priority, Outgoing{SliceKind::kContribution, job, key, iteration, s, encodeSliceHeader(h),
                                              Payload{std::move(e.pin), e.bytes}});
    touched[owner] = true;
  }
  for (transport::Rank r = 0; r < transport_.size(); ++r)
    if (touched[r]) dispatch(r);
}

void ReductionEngine::observeEncodings(KeyState& k, uint64_t iteration, const std::vector<SliceEncoding>& encodings) {
  for (uint32_t s = 0; s < encodings.size(); ++s) {
    const SliceEncoding& e = encodings[s];
    if (e.seconds <= 0) continue;  // not encoded (an exact slice), or not timed
    const uint64_t n = k.geometry.size(s);
    k.push_stats->encode->Observe(e.seconds);
    planner_.recordEncode(k.push_spec.name, n, e.bytes.size(), e.seconds);
    sampleResidual(*k.push_stats, *k.push, k.coder->residualOf(k.work.job, k.spec.key, s), n);
  }
  // Sampled: slice 0 now and then. The sum is still in the first buffer (results come later).
  if (!k.silent.due(0, iteration) || encodings.empty() || encodings[0].seconds <= 0) return;
  const std::span<const float> input(k.outputs[0], k.geometry.size(0));
  if (!k.silent.observe(*k.push, input, encodings[0].bytes, {k.spec.key, 0, iteration})) return;
  k.push_stats->silent->Increment();
  GC_LOG(kWarn, "agent", "tensor ", k.spec.key, ": codec '", k.push_spec.name, "' encoded nonzero gradients as nothing "
         "but zeros for ", k.silent.silentIterations(), " iterations; its residual only grows and the layer does not "
         "train (lower the codec's threshold or raise its ratio: gcagent --list-codecs)");
}

void ReductionEngine::onCoded(uint64_t job, uint64_t key, uint64_t iteration, const Status& status) {
  KeyState* k = findKey(job, key);
  if (k == nullptr || !k->active || k->iteration != iteration) return;
  if (!status.ok() && transport_.size() > 1) {
    const std::string why = strCat("results of tensor ", key, ": ", status.message());
    badMessage(why);
    return completeKey(job, *k, Status::dataLoss(why));
  }
  completeKey(job, *k, status);  // the last slice's report, for every slice
}

void ReductionEngine::updateCostGauges() {
  auto set = [&](const std::string& codec, const char* step, const scheduler::LinearCost& c) {
    stats_->gauge(metrics::Id::cost_model, {codec, step, "w"}).Set(c.w);
    stats_->gauge(metrics::Id::cost_model, {codec, step, "b"}).Set(c.b);
    stats_->gauge(metrics::Id::cost_model, {codec, step, "overhead"}).Set(c.overhead);
  };
  std::vector<std::string> codecs;
  for (const auto& [job, js] : jobs_)
    for (const auto& [key, k] : js->keys)
      if (std::find(codecs.begin(), codecs.end(), k.push_spec.name) == codecs.end()) codecs.push_back(k.push_spec.name);
  for (const std::string& codec : codecs) {
    const scheduler::StepCosts c = planner_.costs(codec);
    set(codec, "encode", c.encode);
    set(codec, "decode", c.decode);
    set(codec, "wire", c.gather);
    set(codec, "aggregate", c.aggregate);
  }
}

void ReductionEngine::badMessage(std::string_view why) {
  ++counters_.bad_messages;
  stats_->recordError(metrics::ErrorKind::kBadMessage, why);
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
  const std::string text = strCat("slice from rank ", m.from, " rejected: ", why.message());
  badMessage(text);
  GC_LOG(kWarn, "agent", text);
}

void ReductionEngine::onMessage(const transport::Message& m) {
  auto parsed = parseSliceHeader(m.header);
  if (!parsed.ok()) return reject(m, parsed.status());
  const SliceMessage& h = *parsed;
  // Slices of a job or a tensor not declared here yet wait for the declaration: the peer's
  // trainers may simply have declared first (shims declare tensors as they meet them).
  auto stash = [&](const char* what) {
    if (!stash_.keep(h.job, m))
      reject(m, Status::resourceExhausted(strCat(what, " is unknown here and the early-slice stash is full")));
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
  const uint64_t slice_elements = k.geometry.size(h.slice);
  if (h.kind == SliceKind::kContribution) {
    const bool compressed = h.codec_fingerprint == k.push_fp && k.push_spec.name != "none";
    if (h.codec_fingerprint != k.push_fp && h.codec_fingerprint != raw_fp_)
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, ": codec differs from '", k.push_spec.name,
                                                      "' (aggregation ", aggregationName(k.spec.policy.aggregation),
                                                      ")")));
    if (ownerOf(h.key, h.slice) != transport_.rank())
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, " is not owned here")));
    if (k.completed_once && h.iteration <= k.last_iteration && !(k.active && h.iteration == k.iteration))
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, ": contribution for finished iteration ",
                                                      h.iteration)));
    counters_.raw_bytes_received += slice_elements * 4;
    counters_.wire_bytes_received += m.payload.size();
    metrics::CodecStats& cs = compressed ? *k.push_stats : *k.raw_stats;
    cs.raw_received->Increment(static_cast<double>(slice_elements * 4));
    cs.wire_received->Increment(static_cast<double>(m.payload.size()));
    auto copy = std::make_shared<ByteBuffer>(m.payload.begin(), m.payload.end());
    const std::span<const std::byte> bytes(*copy);
    addContribution(h.job, k, h.slice, h.iteration, m.from, {std::move(copy), bytes, compressed, h.contributors});
  } else {
    const bool compressed = h.codec_fingerprint == k.pull_fp && k.pull_spec.name != "none";
    if (h.codec_fingerprint != k.pull_fp && h.codec_fingerprint != (raw_fp_ ^ kResultMark))
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, ": result codec differs from '",
                                                      k.pull_spec.name, "'")));
    if (ownerOf(h.key, h.slice) != m.from)
      return reject(m, Status::invalidArgument(strCat("tensor ", h.key, " slice ", h.slice, ": result from rank ",
                                                      m.from, ", which does not own it")));
    counters_.raw_bytes_received += slice_elements * 4;
    counters_.wire_bytes_received += m.payload.size();
    metrics::CodecStats& cs = compressed ? *k.pull_stats : *k.raw_stats;
    cs.raw_received->Increment(static_cast<double>(slice_elements * 4));
    cs.wire_received->Increment(static_cast<double>(m.payload.size()));
    applyResult(h.job, k, h.slice, h.iteration, h.contributors, m.payload, compressed);
  }
}

void ReductionEngine::onPeerDown(transport::Rank peer, const Status& why) {
  const Status status = Status::unavailable(strCat("peer rank ", peer, " lost: ", why.message()));
  stats_->recordError(why.code() == StatusCode::kDeadlineExceeded ? metrics::ErrorKind::kTimeout
                                                                  : metrics::ErrorKind::kPeerLost,
                      status.message());
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
  std::set<std::string, std::less<>> codecs_in_use;
  for (const auto& [job, js] : jobs_)
    for (const auto& [key, k] : js->keys) {
      codecs_in_use.insert(k.push_spec.name);
      codecs_in_use.insert(k.pull_spec.name);
      codecs_in_use.insert("none");  // the raw stats of every tensor's uncompressed slices
      for (const auto& [id, acc] : k.accumulators)
        for (transport::Rank r = 0; r < acc.seen.size() && r < waiting.size(); ++r)
          if (!acc.seen[r]) waiting[r] += 1;
    }
  for (transport::Rank r = 0; r < transport_.size(); ++r)
    if (peer_stats_[r] != nullptr) peer_stats_[r]->queue_depth->Set(waiting[r]);
  stats_->retireCodecGaugesExcept(codecs_in_use);
}

size_t ReductionEngine::pendingAccumulators() const {
  size_t n = 0;
  for (const auto& [job, js] : jobs_)
    for (const auto& [key, k] : js->keys) n += k.accumulators.size();
  return n;
}

}  // namespace gcagent::agent

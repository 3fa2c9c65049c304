#include "agent/engine/reduction_engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "agent/engine/engine_state.h"
#include "agent/coding/host_coder_device.h"
#include "agent/wire/job_notice.h"
#include "agent/coding/silent_codec_watch.h"
#include "agent/engine/slice_protocol.h"
#include "agent/coding/slice_math.h"
#include "agent/wire/peer_frame.h"
#include "agent/wire/slice_message.h"
#include "common/log.h"
#include "common/str_cat.h"
#include "compress/registry.h"

namespace gcagent::agent {

scheduler::PlannerOptions plannerOptionsOf(const EngineOptions& o, uint32_t nodes) {
  return {o.selection, o.min_elements, nodes, o.slice_elements, o.refit_interval, o.link_gbps};
}

uint64_t jobIdOf(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

ReductionEngine::ReductionEngine(transport::Transport& transport, EngineOptions options, CompleteFn on_complete)
    : transport_(transport), options_(std::move(options)), on_complete_(std::move(on_complete)),
      stash_(options_.stash_budget_bytes),
      stats_(options_.stats ? options_.stats : std::make_shared<metrics::Stats>()),
      membership_(transport_,
                  {options_.on_peer_loss, options_.shrink_grace, options_.min_nodes, options_.quorum,
                   options_.reduction_timeout, options_.now, options_.votes},
                  *stats_,
                  [this](const MembershipView& before, const MembershipView& view, const std::string&) {
                    onViewInstalled(before, view);
                  }),
      planner_(options_.planner ? options_.planner
                                : std::make_shared<scheduler::Planner>(plannerOptionsOf(options_, transport_.size()))),
      gauges_(*stats_, *planner_, sampler_, transport_.size(), transport_.rank()),
      alive_(std::make_shared<ReductionEngine*>(this)) {
  lanes_ = std::make_unique<PeerLanes>(
      transport_, options_.inflight_per_peer, options_.inflight_bytes, stats_, *planner_, options_.now,
      [this](const Outgoing& o) {
        // A node may finish before its own shares have left (TopologyTraits), and its
        // trainers may even leave: the peers still need them.
        if (auto d = departed_shares_.find({o.job, o.key}); d != departed_shares_.end() && d->second == o.iteration)
          return true;
        KeyState* k = findKey(o.job, o.key);
        if (k == nullptr) return false;
        return (k->active && k->iteration == o.iteration) ||
               (sharesOutliveStep(*k) && k->last_ok && k->last_iteration == o.iteration);
      },
      [this](const Outgoing& o, const Status& why) {
        KeyState* k = findKey(o.job, o.key);
        if (k != nullptr && k->active && k->iteration == o.iteration) completeKey(o.job, *k, why);
      });
  const auto budget = options_.residual_budget_bytes;
  host_coder_ = std::make_shared<LocalCoder>(makeHostCoderDevice(options_.host_stream, options_.codec_env), budget);
  owner_ = std::make_unique<OwnerSide>(
      transport_.size(),
      options_.owner_coder
          ? options_.owner_coder
          : std::make_shared<LocalCoder>(makeHostCoderDevice(options_.host_stream, options_.codec_env), budget),
      *planner_, sampler_,
      [this](uint64_t job, uint64_t key) -> TensorRoute* { return findKey(job, key); },
      [this](const OwnerSide::Slice& s, Result<SliceEncoding> result, bool compressed, uint32_t contributors,
             bool final) { onResult(s, std::move(result), compressed, contributors, final); },
      [this](const std::string& why) { badMessage(why); });
  realigner_ = std::make_unique<JobRealigner>(transport_, *owner_, *stats_,
                                              [this](uint64_t job, KeyState& k, const Status& why) {
                                                completeKey(job, k, why);
                                              });
}

EngineCounters ReductionEngine::counters() const {
  EngineCounters c = counters_;
  c.realignments = realigner_->realignments();
  return c;
}

ReductionEngine::~ReductionEngine() { *alive_ = nullptr; }

uint32_t ReductionEngine::ownerOf(const KeyState& k, uint32_t slice) const {
  return k.toOwner() ? *k.spec.policy.owner : membership_.ownerOf(k.spec.key, slice);
}

SliceFlow ReductionEngine::flowOf(const KeyState& k, uint32_t slice, bool own_share_encoded) const {
  return sliceFlowOf(k.topology, own_share_encoded, membership_.view().members, ownerOf(k, slice), transport_.rank(),
                     k.toOwner());
}

Result<std::vector<DeclaredTensor>> ReductionEngine::declareJob(uint64_t job, const std::vector<TensorSpec>& tensors) {
  auto& slot = jobs_[job];
  if (!slot) {
    slot = std::make_unique<JobState>();
    slot->announced.assign(transport_.size(), 0);
    slot->announced_reload.assign(transport_.size(), 0);
    realigner_->declared(job, *slot);
  }
  JobState& js = *slot;
  std::unordered_map<uint64_t, KeyState> keys;
  const RouteOptions route_options{options_.default_codec, options_.result_codec, options_.slice_elements,
                                   options_.codec_env,    options_.prioritize,   options_.topology,
                                   options_.gpu_staged_codecs, transport_.size() == 1};
  std::vector<DeclaredTensor> declared;
  for (const TensorSpec& t : tensors) {
    if (t.policy.owner && *t.policy.owner >= transport_.size())
      return Status::invalidArgument(strCat("tensor ", t.key, ": reduce.owner ", *t.policy.owner, " is not a node (",
                                            transport_.size(), " nodes)"));
    GC_ASSIGN_OR_RETURN(TensorRoute route, makeRoute(t, route_options, *planner_, *stats_));
    declared.push_back({t.key, route.device_coded, t.policy.contributor});
    KeyState k(std::move(route));
    auto old = js.keys.find(t.key);
    if (old != js.keys.end()) {
      if (old->second.active) return Status::failedPrecondition(strCat("tensor ", t.key, " is being reduced"));
      if (old->second.sameWire(k)) {
        k.completed_once = old->second.completed_once;
        k.last_ok = old->second.last_ok;  // its shares may still wait in the lanes (TopologyTraits)
        k.last_iteration = old->second.last_iteration;
        k.last_trainer_iteration = old->second.last_trainer_iteration;
        k.coder = old->second.coder;
        k.restored = std::move(old->second.restored);  // a checkpoint's, put back before this declare
      }
    }
    keys.emplace(t.key, std::move(k));
  }
  for (auto& [key, old] : js.keys) {
    auto now = keys.find(key);
    if (now == keys.end() || !now->second.sameWire(old)) {  // what was owed belongs to another tensor
      owner_->forget(job, key, old.slice_count);
      if (old.coder) old.coder->forget(job, key);
    }
  }
  js.keys = std::move(keys);
  for (auto& [key, k] : js.keys) replan(k, *planner_, options_.min_elements, /*log_always=*/true);
  gauges_.planned(jobs_);
  // Replay the slices peers sent before this node knew the job.
  for (const EarlySliceStash::Slice& s : stash_.take(job)) onMessage({s.from, s.header, s.payload});
  return declared;
}

void ReductionEngine::dropJob(uint64_t job) {
  failJob(job, Status::failedPrecondition("job dropped"));
  auto j = jobs_.find(job);
  if (j == jobs_.end()) return;
  std::vector<LocalCoder*> coders;
  for (auto& [key, k] : j->second->keys)
    if (k.coder && std::find(coders.begin(), coders.end(), k.coder.get()) == coders.end()) coders.push_back(k.coder.get());
  for (LocalCoder* c : coders) c->forgetJob(job);
  owner_->forgetJob(job);
  for (const auto& [key, k] : j->second->keys)
    if (sharesOutliveStep(k) && k.last_ok) departed_shares_[{job, key}] = k.last_iteration;
  jobs_.erase(j);
}

KeyState* ReductionEngine::findKey(uint64_t job, uint64_t key) {
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
    return Status::failedPrecondition(strCat("tensor ", key, " is still reducing iteration ", k.trainer_iteration));
  if (k.completed_once && iteration <= k.last_trainer_iteration)
    return Status::invalidArgument(strCat("tensor ", key, ": iteration ", iteration, " is not after iteration ",
                                          k.last_trainer_iteration));
  if (buffers.empty()) return Status::invalidArgument("no buffers");
  // Started even when it fails at once below: the node's frontier moves past it.
  GC_ASSIGN_OR_RETURN(const uint64_t wire, js.align.start(iteration));
  if (Status unreachable = membership_.unreachable(); !unreachable.ok()) {
    js.recordOutcome(false, options_.now());
    js.align.failed(iteration);
    js.recordGivenUp(wire);
    // Failed like one that started: a late slice of it from a peer is stale here.
    k.completed_once = true;
    k.last_iteration = wire;
    k.last_trainer_iteration = iteration;
    return unreachable;
  }
  if (k.toOwner() && !membership_.view().contains(*k.spec.policy.owner)) {
    js.recordOutcome(false, options_.now());
    js.align.failed(iteration);
    js.recordGivenUp(wire);
    k.completed_once = true;
    k.last_iteration = wire;
    k.last_trainer_iteration = iteration;
    return Status::unavailable(strCat("tensor ", key, " is reduced to node ", *k.spec.policy.owner,
                                      ", which is not a member now (", membership_.view().describe(), ")"));
  }
  k.active = true;
  k.ready = false;
  k.iteration = wire;
  k.trainer_iteration = iteration;
  k.outputs = std::move(buffers);
  // Reduced to another node, this one waits for no result: it is done once its shares left.
  k.slices_left = k.toOwner() && *k.spec.policy.owner != transport_.rank() ? 0 : k.slice_count;
  k.started = options_.now();
  if (planner_->maybeRefit(k.started)) gauges_.costs(jobs_);
  if (k.plan_epoch != planner_->epoch() && replan(k, *planner_, options_.min_elements, /*log_always=*/false))
    gauges_.planned(jobs_);
  const bool compressed = k.pushCompressed();
  stats_->decision(compressed).Increment();
  // Under mxnet a node's own share is encoded like every other node's; otherwise the owner
  // adds it exactly. A lone node then still encodes and decodes, as a one-worker dist_sync.
  const bool own_share_encoded = k.mxnet() && compressed;
  const bool alone = membership_.size() == 1 && !own_share_encoded;
  k.contributors = static_cast<uint32_t>(k.outputs.size());
  // The node's side runs where the gradients are: on their GPU's coder, else the host's.
  const bool on_host = coder == nullptr;
  if (on_host) coder = host_coder_;
  if (k.coder && k.coder != coder) k.coder->forget(job, key);  // its residuals stay behind otherwise
  k.coder = std::move(coder);
  k.work = {job,    key, wire, k.push_spec, k.pull_spec, k.geometry, k.outputs, k.priority,
            on_host ? std::move(keepalive) : nullptr, /*renamed=*/false, 0, 0};
  if (k.restored) {  // a checkpoint's residuals, ahead of this reduction's encode
    Status restored = k.coder->importStates(k.work, *k.restored);
    k.restored.reset();
    if (!restored.ok()) {
      completeKey(job, k, Status(restored.code(), strCat("restoring the error-feedback state: ", restored.message())));
      return {};
    }
  }
  auto engine = std::weak_ptr<ReductionEngine*>(alive_);
  if (alone) {
    k.coder->sum(k.work, k.divisor(k.contributors), [engine, job, key, wire](const Status& s) {
      if (auto e = engine.lock(); e && *e) (*e)->onCoded(job, key, wire, s);
    });
    return {};
  }
  // The shares this node adds itself go exact (slice_flow.h): an owner's (unless mxnet
  // encodes it), a ring hop's; the rest are encoded.
  std::vector<bool> own(k.slice_count);
  for (uint32_t s = 0; s < k.slice_count; ++s) own[s] = flowOf(k, s, own_share_encoded).share_exact;
  k.coder->encode(k.work, compressed, own, [engine, job, key, wire, compressed](Result<KeyEncodings> r) {
    if (auto e = engine.lock(); e && *e) (*e)->onEncoded(job, key, wire, compressed, std::move(r));
  });
  return {};
}

ResidualLayout ReductionEngine::layoutOf(const KeyState& k) const {
  return {k.spec.key,  k.spec.elements,   k.geometry.slice_elements,
          k.push_fp,   k.pull_fp,         k.push_spec.name,
          k.pull_spec.name, transport_.rank(), transport_.size(),
          static_cast<uint8_t>(k.topology)};
}

void ReductionEngine::exportState(uint64_t job, uint64_t key,
                                  std::function<void(Result<std::vector<std::byte>>)> done) {
  KeyState* k = findKey(job, key);
  if (k == nullptr) return done(Status::invalidArgument(strCat("tensor ", key, " is not declared")));
  if (k->active)
    return done(Status::failedPrecondition(strCat("tensor ", key, " is reducing iteration ", k->trainer_iteration,
                                                  ": read its error-feedback state between steps")));
  auto state = std::make_shared<ResidualState>();
  state->layout = layoutOf(*k);
  // The node's side first (from the checkpoint not yet in force, if one waits), then the owner's.
  auto owners = [this, job, key, slices = k->slice_count, state, done = std::move(done)](const Status& node) mutable {
    if (!node.ok()) return done(node);
    owner_->exportResiduals(job, key, slices, [state, done = std::move(done)](Result<std::vector<ResidualPart>> parts) {
      if (!parts.ok()) return done(parts.status());
      for (ResidualPart& p : *parts) state->parts.push_back(std::move(p));
      done(encodeResidualState(*state));
    });
  };
  auto addNode = [state](const LocalCoder::SliceStates& slices) {
    for (uint32_t s = 0; s < slices.size(); ++s)
      if (!slices[s].empty()) state->parts.push_back({ResidualKind::kNode, s, slices[s]});
  };
  if (k->restored || !k->coder) {
    if (k->restored) addNode(*k->restored);
    return owners({});
  }
  k->coder->exportStates(job, {key}, [addNode, owners = std::move(owners)](
                                         Result<std::vector<LocalCoder::SliceStates>> r) mutable {
    if (!r.ok()) return owners(r.status());
    addNode(r->at(0));
    owners({});
  });
}

Status ReductionEngine::importState(uint64_t job, uint64_t key, std::span<const std::byte> blob, uint32_t* dropped) {
  *dropped = 0;
  KeyState* k = findKey(job, key);
  if (k == nullptr) return Status::invalidArgument(strCat("tensor ", key, " is not declared"));
  if (k->active)
    return Status::failedPrecondition(strCat("tensor ", key, " is reducing iteration ", k->trainer_iteration,
                                             ": put its error-feedback state back before its first step"));
  auto state = decodeResidualState(blob);
  if (!state.ok()) return Status(state.status().code(), strCat("tensor ", key, ": ", state.status().message()));
  const ResidualLayout here = layoutOf(*k);
  if (std::string why = mismatchOf(state->layout, here); !why.empty())
    return Status::invalidArgument(strCat("tensor ", key, ": the error-feedback state does not fit: ", why));
  // The owners' parts hold only where this node owns the same slices.
  const bool owned_here = sameOwnership(state->layout, here) && membership_.size() == transport_.size();
  LocalCoder::SliceStates node(k->slice_count);
  std::vector<const ResidualPart*> owner_parts;
  for (const ResidualPart& p : state->parts) {
    const size_t n = k->geometry.size(p.slice);
    const compress::Codec& codec = p.kind == ResidualKind::kResult ? *k->pull : *k->push;
    if (p.values.size() != codec.stateElements(n))
      return Status::invalidArgument(strCat("tensor ", key, ": the error-feedback state of slice ", p.slice, " holds ",
                                            p.values.size(), " floats; codec ", codec.name(), " keeps ",
                                            codec.stateElements(n)));
    if (p.kind == ResidualKind::kNode) node[p.slice] = p.values;
    else if (owned_here) owner_parts.push_back(&p);
    else ++*dropped;
  }
  if (*dropped > 0)
    GC_LOG(kWarn, "engine", "tensor ", key, ": ", *dropped, " owner residuals of the checkpoint left out: it was saved ",
           "by node ", state->layout.node_rank, " of ", state->layout.node_count, ", this is node ", here.node_rank,
           " of ", membership_.size(), " members (the slices have other owners now)");
  for (const ResidualPart* p : owner_parts) GC_RETURN_IF_ERROR(owner_->importResidual(job, *k, *p));
  k->restored = std::move(node);
  return {};
}

void ReductionEngine::onResult(const OwnerSide::Slice& s, Result<SliceEncoding> result, bool compressed,
                               uint32_t contributors, bool final) {
  KeyState* k = findKey(s.job, s.key);
  if (k == nullptr) return;
  if (!result.ok()) {
    if (k->active && k->iteration == s.iteration) completeKey(s.job, *k, result.status());
    return;
  }
  // Meant to be coded, but the sum held an inf or a NaN (LocalCoder::encode): raw.
  if (!compressed && (final ? k->pullCompressed() : k->pushCompressed())) stats_->nonFiniteSlices().Increment();
  const uint64_t n = k->geometry.size(s.slice);
  const Payload payload{std::move(result->pin), result->bytes};
  const SliceKind kind = final ? SliceKind::kResult : SliceKind::kContribution;
  const uint32_t fp = final ? (compressed ? k->pull_fp : rawResultFingerprint())
                            : (compressed ? k->push_fp : rawContributionFingerprint());
  SliceMessage h{kind,         s.job,        s.key, s.iteration, s.slice, k->slice_count, k->spec.elements, fp,
                 contributors, membership_.view().epoch, k->topology, membership_.view().proposer};
  const auto header = encodePeerFrame(h);
  // A parameter server's owner sends the result to every node; a ring hop, its sum to the
  // next; under allgather every node made the result itself.
  const std::vector<uint32_t> to = flowOf(*k, s.slice).sum_to;
  metrics::CodecStats& stats = !compressed ? *k->raw_stats : final ? *k->pull_stats : *k->push_stats;
  countSent(counters_, stats, n * sizeof(float), payload.bytes.size(), static_cast<uint32_t>(to.size()));
  for (transport::Rank r : to) {
    lanes_->push(r, k->priority, Outgoing{kind, s.job, s.key, s.iteration, s.slice, header, payload});
    lanes_->send(r);
  }
  if (final) applyResult(s.job, *k, s.slice, s.iteration, contributors, payload.bytes, compressed, payload.pin);
}

void ReductionEngine::applyResult(uint64_t job, KeyState& k, uint32_t slice, uint64_t iteration,
                                  uint32_t contributors, std::span<const std::byte> encoded, bool compressed,
                                  std::shared_ptr<const void> encoded_owner) {
  if (!k.active || k.iteration != iteration) {  // of an iteration given up here
    ++counters_.stale_slices;
    stats_->staleSlices(/*results=*/true).Increment();
    return;
  }
  const float divisor = k.divisor(contributors);
  if (!k.coder->device().hostAddressable()) stats_->gpuCopy(false).Increment(static_cast<double>(encoded.size()));
  // The coder runs a key's decodes in order: only the last one reports, for all of them.
  if (--k.slices_left > 0)
    return k.coder->decodeResult(k.work, slice, compressed, encoded, divisor, {}, std::move(encoded_owner));
  auto engine = std::weak_ptr<ReductionEngine*>(alive_);
  k.coder->decodeResult(
      k.work, slice, compressed, encoded, divisor,
      [engine, job, key = k.spec.key, iteration](const Status& s) {
        if (auto e = engine.lock(); e && *e) (*e)->onCoded(job, key, iteration, s);
      },
      std::move(encoded_owner));
}

void ReductionEngine::completeKey(uint64_t job, KeyState& k, const Status& status) {
  if (!k.active) return;
  auto j = jobs_.find(job);
  JobState* js = j == jobs_.end() ? nullptr : j->second.get();
  // Held after a stall: the peers' answers decide it (stall_reconcile.cc). A failure meanwhile
  // (a peer's link, which the stall itself may have broken) is set aside.
  if (js != nullptr && js->reconciles(k)) {
    if (status.ok()) k.ready = true;
    else GC_LOG(kDebug, "agent", "tensor ", k.spec.key, " iteration ", k.iteration, ": held after a stall, not failed: ",
                status.message());
    return;
  }
  k.active = false;
  k.completed_once = true;
  k.last_ok = status.ok();
  k.last_iteration = k.iteration;
  k.last_trainer_iteration = k.trainer_iteration;
  std::optional<uint32_t> reload_root;
  if (js != nullptr) {
    js->recordOutcome(status.ok(), options_.now());
    if (!status.ok()) {
      js->align.failed(k.trainer_iteration);
      js->recordGivenUp(k.iteration);  // calls a reload: other nodes may have completed it
      realigner_->announceToAll(job, *js);
    } else if (js->reload.completes(k.iteration)) {
      const MembershipView& view = membership_.view();
      reload_root = view.root().value_or(view.members.empty() ? 0 : view.members.front());
    }
  }
  // A failed reduction may still have work queued on its coder (decodes of results that came
  // before the failure): the trainers hear of the failure only once none of it will write
  // their buffers, where they put their next step's gradients.
  if (!status.ok() && k.coder) {
    auto engine = std::weak_ptr<ReductionEngine*>(alive_);
    k.coder->abandon(k.work, [engine, job, iteration = k.trainer_iteration, key = k.spec.key, status](const Status&) {
      if (auto e = engine.lock(); e && *e && (*e)->on_complete_) (*e)->on_complete_(job, iteration, key, status, {});
    });
  }
  const bool fenced = !status.ok() && k.coder;
  k.outputs.clear();
  k.work.buffers.clear();
  k.work.keepalive.reset();  // the coder's queued work and the sends in flight hold their own
  if (status.ok()) {
    membership_.stepCompleted();
    ++counters_.keys_completed;
    stats_->tensorsReduced().Increment();
    stats_->reduction(k.size_class).Observe(secondsBetween(k.started, options_.now()));
  } else {
    stats_->recordError(metrics::ErrorKind::kReductionFailed, strCat("tensor ", k.spec.key, ": ", status.message()));
    // Partial sums of the failed iteration must never mix into a later one.
    owner_->dropSums(job, k.spec.key, k.iteration);
  }
  if (on_complete_ && !fenced) on_complete_(job, k.trainer_iteration, k.spec.key, status, reload_root);
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
  if (compressed && on_host) gauges_.encoded(*k, iteration, encodings);
  const uint32_t self = transport_.rank();
  std::vector<bool> touched(transport_.size(), false);
  for (uint32_t s = 0; s < k->slice_count && k->active && k->iteration == iteration; ++s) {
    SliceEncoding& e = encodings[s];
    const SliceFlow flow = flowOf(*k, s, compressed && k->mxnet());
    // A slice that held an inf or a NaN travels raw, as an uncompressed one (LocalCoder::encode).
    if (e.raw) stats_->nonFiniteSlices().Increment();
    const bool slice_compressed = compressed && !e.raw;
    metrics::CodecStats& cs = slice_compressed ? *k->push_stats : *k->raw_stats;
    const uint32_t fp = slice_compressed ? k->push_fp : rawContributionFingerprint();
    // A share both sent and added here (allgather) would point, uncompressed, into the
    // trainers' buffers, which this node's result overwrites while its sends may still wait
    // in the lanes: it travels as a copy. So does one of a tensor reduced to another node:
    // this node completes before it has left, and its trainers write the next step there.
    if (!slice_compressed && (flow.share_merged_here || k->toOwner()) && !flow.share_to.empty()) {
      auto copy = std::make_shared<ByteBuffer>(e.bytes.begin(), e.bytes.end());
      e.bytes = *copy;
      e.pin = std::move(copy);
    }
    if (!flow.share_to.empty()) {
      SliceMessage h{SliceKind::kContribution, job, key, iteration, s, k->slice_count, k->spec.elements, fp,
                     k->contributors, membership_.view().epoch, k->topology, membership_.view().proposer};
      const auto header = encodePeerFrame(h);
      countSent(counters_, cs, k->geometry.size(s) * sizeof(float), e.bytes.size(), static_cast<uint32_t>(flow.share_to.size()));
      for (uint32_t to : flow.share_to) {
        lanes_->push(to, k->priority, Outgoing{SliceKind::kContribution, job, key, iteration, s, header,
                                               Payload{e.pin, e.bytes}});
        touched[to] = true;
      }
    }
    if (flow.share_merged_here)
      owner_->add({job, key, s, iteration}, self,
                  {std::move(e.pin), e.bytes, slice_compressed && !flow.share_exact, k->contributors}, flow.sum);
  }
  for (transport::Rank r = 0; r < transport_.size(); ++r)
    if (touched[r]) lanes_->send(r);
  // Reduced to another node: every share is on its way (copies or encodings the lanes hold).
  if (k->active && k->iteration == iteration && k->slices_left == 0) completeKey(job, *k, {});
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

void ReductionEngine::badMessage(std::string_view why) {
  ++counters_.bad_messages;
  stats_->recordError(metrics::ErrorKind::kBadMessage, why);
}

void ReductionEngine::reject(const transport::Message& m, const Status& why) {
  const std::string text = strCat("slice from rank ", m.from, " rejected: ", why.message());
  badMessage(text);
  GC_LOG(kWarn, "agent", text);
}

void ReductionEngine::onMessage(const transport::Message& m) {
  auto parsed = parsePeerFrame(m.header, transport_.size());
  if (!parsed.ok()) return reject(m, parsed.status());
  if (const auto* notice = std::get_if<RealignNotice>(&*parsed)) {
    auto j = jobs_.find(notice->job);
    realigner_->onNotice(m.from, *notice, j == jobs_.end() ? nullptr : j->second.get());
    return;
  }
  if (const auto* notice = std::get_if<MembershipNotice>(&*parsed)) return membership_.onNotice(m.from, *notice);
  if (const auto* query = std::get_if<OutcomeQuery>(&*parsed)) return answerOutcome(m.from, *query);
  if (const auto* answer = std::get_if<OutcomeAnswer>(&*parsed)) return onOutcomeAnswer(m.from, *answer);
  const auto* slice = std::get_if<SliceMessage>(&*parsed);
  if (slice == nullptr)  // a job notice: the control side's (agent.cc routes them there)
    return reject(m, Status::invalidArgument("a job notice reached the reduction engine"));
  const SliceMessage& h = *slice;
  // Sent under another membership: ownership and the set of contributors differ. A peer
  // passes a view on before any slice under it (membership.h), so this one is older, or
  // (transport.quorum = none) of a view that lost.
  if (ViewId{h.view, h.view_proposer} != membership_.view().id()) {
    ++counters_.stale_slices;
    stats_->staleSlices(/*results=*/h.kind == SliceKind::kResult).Increment();
    GC_LOG(kDebug, "agent", "rank ", m.from, ": slice of tensor ", h.key, " sent under membership epoch ", h.view,
           " (proposed by node ", h.view_proposer, ") dropped: this node is at ", membership_.view().describe());
    return membership_.tellView(m.from);
  }
  if (!membership_.isMember(m.from))
    return reject(m, Status::invalidArgument(strCat("rank ", m.from, " is not in the membership, ",
                                                    membership_.view().describe())));
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
  std::optional<RingHop> hop;
  if (traitsOf(k.topology).hops)
    hop = ringHopOf(membership_.view().members, membership_.ownerOf(h.key, h.slice), transport_.rank());
  auto checked = checkSlice(h, k, ownerOf(k, h.slice), transport_.rank(), m.from, hop ? &*hop : nullptr);
  if (!checked.ok()) return reject(m, checked.status());
  const bool compressed = *checked;
  const bool contribution = h.kind == SliceKind::kContribution;
  const bool current = k.active && h.iteration == k.iteration;
  // A contribution of an iteration this node finished (completed, which it cannot have
  // without this one, or failed) or gave up.
  if (contribution && !current &&
      ((k.completed_once && h.iteration <= k.last_iteration) || h.iteration < js.align.floor()))
  {
    // Counted as stale, not as a bad message; the sender hears where the job goes on.
    ++counters_.stale_slices;
    stats_->staleSlices(/*results=*/false).Increment();
    GC_LOG(kDebug, "agent", "rank ", m.from, ": contribution for tensor ", h.key, " iteration ", h.iteration,
           " dropped: given up here");
    return realigner_->announce(h.job, js, m.from);
  }
  const uint64_t raw = k.geometry.size(h.slice) * sizeof(float);
  counters_.raw_bytes_received += raw;
  counters_.wire_bytes_received += m.payload.size();
  metrics::CodecStats& cs = !compressed ? *k.raw_stats : contribution ? *k.push_stats : *k.pull_stats;
  cs.raw_received->Increment(static_cast<double>(raw));
  cs.wire_received->Increment(static_cast<double>(m.payload.size()));
  // A ring's result is passed on first, and a contribution merged later, on the host stream:
  // the payload is kept where the transport received it when it lets us, else copied (the
  // message is gone after this handler).
  const SliceFlow flow = flowOf(k, h.slice);
  const bool forward = !contribution && !flow.result_forward.empty();
  const bool kept = contribution || forward;
  std::shared_ptr<const void> pin = m.payload_owner;
  std::span<const std::byte> bytes = m.payload;
  if (kept && !pin) {
    auto copy = std::make_shared<ByteBuffer>(m.payload.begin(), m.payload.end());
    bytes = *copy;
    pin = std::move(copy);
  }
  if (forward) {
    countSent(counters_, compressed ? *k.pull_stats : *k.raw_stats, raw, bytes.size(), 1);
    for (uint32_t to : flow.result_forward) {
      lanes_->push(to, k.priority,
                   Outgoing{SliceKind::kResult, h.job, h.key, h.iteration, h.slice,
                            std::vector<std::byte>(m.header.begin(), m.header.end()), Payload{pin, bytes}});
      lanes_->send(to);
    }
  }
  if (!contribution) return applyResult(h.job, k, h.slice, h.iteration, h.contributors, bytes, compressed, pin);
  owner_->add({h.job, h.key, h.slice, h.iteration}, m.from, {std::move(pin), bytes, compressed, h.contributors},
              flow.sum);
}

JobAlignment ReductionEngine::alignmentOf(uint64_t job) const {
  auto j = jobs_.find(job);
  return j == jobs_.end() ? JobAlignment{} : j->second->align;
}

}  // namespace gcagent::agent

// The agent's reduction across nodes. Each slice of a tensor has an owner agent (round
// robin from a hash of the key, as P3 places slices on servers). Every other node encodes
// its locally reduced slice with its own residual and sends it to the owner; the owner
// decodes and sums every contribution in fp32, in rank order, and sends the sum to every
// node; each node, the owner included, decodes that one result, so every trainer everywhere
// sees the same bytes, and divides it once by the number of trainers (or keeps the sum).
// How the owner treats its own share and the result is the tensor's aggregation policy
// (agent/engine/reduction_policy.h): bidirectional (its share exact, the sum re-encoded with the
// owner's residual) or mxnet (its share encoded like every other, the sum sent as is).
//
// Iterations are synchronous per key: a key reduces one iteration at a time on a node, and
// owners keep contributions of different iterations apart. The engine runs on the thread
// that owns the transport; the node's side (local sum, encode, result decode) runs on a
// LocalCoder, the host's on a HostStream thread in priority order, a GPU's on its stream.
//
// Sending follows P3: every slice bound for a peer waits in that peer's priority queue
// (the tensor's priority, FIFO among equals) and leaves when the peer's credit window
// (inflight_per_peer slices, optionally inflight_bytes) has room, so a high-priority
// tensor submitted late overtakes the low-priority slices still queued. Whether a
// tensor travels compressed is the planner's decision (scheduler/planner.h); every slice
// names its codec, and a slice sent uncompressed carries its residual along.
//
// Under the ring topology (CaSync-Ring) a slice's owner is where its ring ends instead: the
// partial sum is made hop by hop by the same owner side (each hop merging its
// predecessor's partial with its own share), and the owner's result is forwarded round the
// ring as received (ring_hop.h). Each node then sends to its successor only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "agent/engine/early_slice_stash.h"
#include "agent/engine/engine_gauges.h"
#include "agent/engine/job_alignment.h"
#include "agent/engine/job_realigner.h"
#include "agent/wire/job_notice.h"
#include "agent/wire/outcome_query.h"
#include "agent/engine/job_part.h"
#include "agent/coding/local_coder.h"
#include "agent/engine/membership_node.h"
#include "agent/membership/membership.h"
#include "agent/engine/owner_side.h"
#include "agent/engine/peer_lanes.h"
#include "agent/coding/residual_sampler.h"
#include "agent/engine/ring_hop.h"
#include "agent/engine/slice_flow.h"
#include "agent/engine/tensor_route.h"
#include "agent/engine/reduction_policy.h"
#include "agent/engine/residual_state.h"
#include "common/clock.h"
#include "common/default_init.h"
#include "common/status.h"
#include "compress/codec.h"
#include "metrics/stats.h"
#include "scheduler/planner.h"
#include "scheduler/slicing.h"
#include "transport/transport.h"

namespace gcagent::agent {

class HostStream;
struct SliceMessage;
struct KeyState;
struct JobState;


struct EngineOptions {
  uint64_t slice_elements = 40000;
  compress::CodecSpec default_codec{"none", {}};
  uint64_t min_elements = 0;        // selection kSize: smaller tensors travel uncompressed
  scheduler::Selection selection = scheduler::Selection::kSize;
  double refit_interval = 5.0;       // seconds between re-fits of the auto planner's model
  double link_gbps = 1.0;            // the links' speed the reference model prices
  uint32_t inflight_per_peer = 10;   // slices handed to the transport per peer
  uint64_t inflight_bytes = 0;       // and their bytes; 0: no byte limit
  bool prioritize = true;            // P3; false: every tensor at one priority (a FIFO baseline)
  // How a tensor's slices travel unless it chose (reduce.topology): a sharded parameter
  // server, or CaSync-Ring (scheduler.topology; agent/engine/reduction_policy.h).
  Topology topology = Topology::kPs;
  std::string result_codec = "same";  // codec of the owner's result: "same" or a codec name
  // What the residuals kept on the host may take: the node's (of host gradients), and apart
  // the owner's (of the results it re-encodes). A GPU's coder has its own.
  size_t residual_budget_bytes = SIZE_MAX;
  // Where the host's codec work runs (the node's side of host gradients, and every owner's
  // merge and result encoding): a thread of its own, most urgent tensor first. Required.
  std::shared_ptr<HostStream> host_stream;
  // Where the slices this node owns are merged and their results encoded (owner_side.h): a
  // GPU's coder puts the sums in its memory; null: a coder on the host stream, with
  // residual_budget_bytes.
  std::shared_ptr<LocalCoder> owner_coder;
  size_t stash_budget_bytes = 256u << 20;  // slices that arrive before their job is declared here
  // A reduction not complete after this many seconds fails, and its iteration is given up on
  // every node (transport.reduction_timeout); 0: no deadline.
  double reduction_timeout = 60;
  // What a lost peer does to the job (agent/membership/membership.h): kFail fails reductions until it is
  // back; kShrink also goes on without it once it has been away `shrink_grace` seconds, and
  // takes it back when its link is up again (transport.on_peer_loss, transport.shrink_grace).
  OnPeerLoss on_peer_loss = OnPeerLoss::kFail;
  double shrink_grace = 30;
  uint32_t min_nodes = 1;  // a shrink leaves at least this many (transport.min_nodes)
  // Who must vote for a new view (transport.quorum): a majority of the installed one, or none.
  Quorum quorum = Quorum::kMajority;
  // Where this node's membership votes outlive a restart (agent.state_dir); none: in memory.
  VoteKeeping votes = {};
  // Told each membership change this node adopts (the trainers hear the new node count).
  std::function<void(const MembershipView&)> on_membership;
  // Codecs whose gradients on a GPU are staged through host memory for the CPU codecs even
  // where a LocalCoder could code them: the selection codecs launch dozens of small kernels
  // per slice, slower than the CPU on an H100 (bench/gpu_path/h100.txt).
  std::vector<std::string> gpu_staged_codecs = {"none", "topk", "dgc", "threshold"};
  compress::CodecEnv codec_env;
  // Where the engine counts bytes, times and errors; null: a private, unexported set.
  std::shared_ptr<metrics::Stats> stats;
  // Decides what travels compressed and re-fits its cost model (scheduler/planner.h); null:
  // one of the engine's own, made by plannerOptionsOf.
  std::shared_ptr<scheduler::Planner> planner;
  // The clock of the planner's re-fits, the link timings and the reduction times.
  SteadyNow now = steadyNow;
};


class ReductionEngine : public JobPart {
 public:
  // Called once per (job, iteration, key) reduce(): ok when the buffers hold the result.
  // reload_root: after this iteration the job's trainers load that node's weights (job_reload.h).
  using CompleteFn = std::function<void(uint64_t job, uint64_t iteration, uint64_t key, const Status&,
                                        std::optional<uint32_t> reload_root)>;

  ReductionEngine(transport::Transport& transport, EngineOptions options, CompleteFn on_complete);
  ~ReductionEngine();

  // Declares (or re-declares) a job's tensors; builds their codecs. Keys whose size or
  // codec changed lose their residuals. Slices that arrived early are replayed. Returns what
  // the trainers' side keeps of each tensor's route, in declaration order.
  Result<std::vector<DeclaredTensor>> declareJob(uint64_t job, const std::vector<TensorSpec>& tensors);
  void dropJob(uint64_t job) override;

  // Reduces one key of one iteration. `buffers` are the local trainers' copies of the
  // gradient (elements floats each), in local rank order; they receive the result (the
  // average or the sum, per the tensor's policy) in place. The node's side of the reduction
  // (local sum, encoding with this node's residuals, decoding the results) runs on `coder`
  // when the buffers are in its device's memory, else on the host coder.
  // `keepalive` owns host buffers' memory (the trainers' segments): uncompressed slices are
  // sent straight from it, so it is held until the coder's work and the transport are done
  // with them, even past the reduction's end. Null: the caller keeps the buffers mapped at
  // least that long.
  Status reduce(uint64_t job, uint64_t iteration, uint64_t key, std::vector<float*> buffers,
                std::shared_ptr<LocalCoder> coder = nullptr, std::shared_ptr<const void> keepalive = nullptr);

  // A tensor's error-feedback state on this node, as a blob for a checkpoint
  // (residual_state.h), read once the work on it so far has run; refused while it reduces.
  void exportState(uint64_t job, uint64_t key, std::function<void(Result<std::vector<std::byte>>)> done);
  // Puts a tensor's state back from a checkpoint: checked against its declaration at once
  // (refused whole if any of it does not fit), in force from its next reduction. `dropped`
  // gets the owner's parts left out because this node's place in the job differs.
  Status importState(uint64_t job, uint64_t key, std::span<const std::byte> blob, uint32_t* dropped);

  void onMessage(const transport::Message& message);
  // Fails every reduction in flight: they need every peer. Until the peer is back, reduce()
  // fails at once, naming it.
  // `shut_down`: it said so (a goodbye), rather than falling silent or failing.
  void onPeerDown(transport::Rank peer, const Status& why, bool shut_down = false);
  // The peer is (back) up: it hears where each job goes on from here (job_alignment.h).
  void onPeerUp(transport::Rank peer);
  // This node's agent did not run for `seconds`, longer than its peers wait before they call
  // it lost (a stopped or starved process): they may have given up its steps in flight, and
  // the results waiting for it would complete those here alone. They, and those that start
  // before the answers come, now complete only once every member peer answers that it did not
  // give them up (stall_reconcile.cc).
  void onStalled(double seconds);
  // Every second or so: fails the reductions past their deadline (reduction_timeout), giving
  // their iteration up on every node; forgets the shares dropped jobs owed once they are sent;
  // lets the view's leader propose a membership change (a member away past the grace period,
  // or a node outside the view back, under on_peer_loss = kShrink); refreshes the gauges that
  // are cheaper to compute when read. Returns the jobs that cannot make progress (stalled:
  // reductions kept failing and none completed for a whole reduction_timeout while the
  // trainers were still trying).
  size_t tick();
  // This node's part in the membership: the installed view, the members away and lost.
  const MembershipNode& membership() const { return membership_; }
  // Fails the reductions in flight of one job (a trainer left, the agent shuts down).
  void failJob(uint64_t job, const Status& why) override;
  // Fails this node's reductions of the job in flight and tells every peer the job's new
  // frontier, so they give that iteration up at once rather than at the reduction timeout.
  void giveUp(uint64_t job, const Status& why);

  // How a job's iterations as its trainers here number them map onto those its nodes agree
  // on (job_alignment.h): they differ after a realignment. Notices between agents speak wire.
  // A job not declared here maps each onto itself.
  JobAlignment alignmentOf(uint64_t job) const;

  EngineCounters counters() const;
  metrics::Stats& stats() { return *stats_; }

 private:
  KeyState* findKey(uint64_t job, uint64_t key);
  // Whether `k`'s shares may still be in the lanes after its step completed here: under
  // allgather (TopologyTraits) and for a tensor reduced to another node.
  static bool sharesOutliveStep(const KeyState& k) { return traitsOf(k.topology).shares_outlive_step || k.toOwner(); }
  // The owner of a slice of `k`: the node it is reduced to (reduce.owner), else round robin
  // over the members.
  uint32_t ownerOf(const KeyState& k, uint32_t slice) const;
  // What a state of `k` is valid for here (residual_state.h).
  ResidualLayout layoutOf(const KeyState& k) const;
  // The owner side's sum of a slice. The whole sum, the result, is sent to every node (ps) or
  // to the successor (ring) and decoded here; a ring hop's partial sum goes to the successor.
  void onResult(const OwnerSide::Slice& slice, Result<SliceEncoding> result, bool compressed, uint32_t contributors,
                bool final);
  // Where a slice's share, sum and result go from this node (slice_flow.h), under the
  // current membership; `own_share_encoded`: mxnet with the tensor compressed.
  SliceFlow flowOf(const KeyState& k, uint32_t slice, bool own_share_encoded = false) const;
  // `encoded_owner`, when set, keeps `encoded` valid past this call (no staging copy).
  void applyResult(uint64_t job, KeyState& k, uint32_t slice, uint64_t iteration, uint32_t contributors,
                   std::span<const std::byte> encoded, bool compressed, std::shared_ptr<const void> encoded_owner);
  void completeKey(uint64_t job, KeyState& k, const Status& status);
  // The coder's side of a reduction: its encodings are in, or a result was decoded.
  void onEncoded(uint64_t job, uint64_t key, uint64_t iteration, bool compressed,
                 Result<KeyEncodings> encoded);
  // The coder's results are decoded (or, on a node on its own, the sum is in every buffer).
  void onCoded(uint64_t job, uint64_t key, uint64_t iteration, const Status& status);
  void reject(const transport::Message& m, const Status& why);
  void badMessage(std::string_view why);
  // A view installed here (membership_node.h): what is in flight was sliced for the old
  // owners, so it fails, residuals of slices that moved go, and every job goes on from its
  // nodes' frontier.
  void onViewInstalled(const MembershipView& before, const MembershipView& view);
  // tick()'s deadlines: the reductions past theirs fail, their iterations given up everywhere.
  void expireReductions();
  // After a stall (onStalled): asks a peer about the job's steps held here, answers a peer's
  // question, takes an answer, and decides the held steps (all failed with `no_answer`).
  void askOutcome(uint64_t job, const JobState& js, transport::Rank peer);
  void answerOutcome(transport::Rank from, const OutcomeQuery& query);
  void onOutcomeAnswer(transport::Rank from, const OutcomeAnswer& answer);
  void endReconcile(uint64_t job, JobState& js, const std::optional<Status>& no_answer);

  transport::Transport& transport_;
  EngineOptions options_;
  CompleteFn on_complete_;
  EngineJobs jobs_;
  EarlySliceStash stash_;
  // (job, key) -> the iteration an allgather tensor of a dropped job last completed here: its
  // shares may still wait in the lanes, and the peers need them (a node can finish first).
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> departed_shares_;
  EngineCounters counters_;
  std::shared_ptr<metrics::Stats> stats_;
  MembershipNode membership_;
  std::shared_ptr<scheduler::Planner> planner_;
  std::unique_ptr<PeerLanes> lanes_;
  std::shared_ptr<LocalCoder> host_coder_;  // the node's side of host gradients
  std::unique_ptr<OwnerSide> owner_;       // the slices this node owns
  std::unique_ptr<JobRealigner> realigner_;
  ResidualSampler sampler_;
  EngineGauges gauges_;
  // Send completions may run after the engine is gone; they reach it through this.
  std::shared_ptr<ReductionEngine*> alive_;
};

// The planner an engine makes for itself on `nodes` nodes (EngineOptions::planner).
scheduler::PlannerOptions plannerOptionsOf(const EngineOptions& options, uint32_t nodes);

// Identifies a job on the wire: a hash of its name, equal on every node.
uint64_t jobIdOf(std::string_view name);

}  // namespace gcagent::agent

// The owner's half of a reduction. For each slice this node owns, every node's contribution
// (its own included) is merged into the slice's sum strictly in node-rank order, so the sum
// has the same bits whatever order the network delivers them in; one that arrives before its
// turn is parked. Merges run on the owner's LocalCoder (the host stream, or a GPU's stream:
// the sums live in its memory) one contribution at a time per slice, at the tensor's
// priority, so the contributions of the most urgent tensor are merged first. Once every
// node's contribution is in, the sum is encoded by the same coder with the owner's result
// residual (under keys apart from the node's side) and handed to `ready`. Under the ring
// topology the same merge makes each hop's partial sum: the predecessor's partial, then this
// node's own share, encoded with the push codec and a residual of the hop's own (the slice's
// result residual when this node owns the slice). Runs on the comm thread; only the coder's
// work runs elsewhere.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "agent/coding/local_coder.h"
#include "agent/coding/residual_sampler.h"
#include "agent/engine/residual_state.h"
#include "agent/engine/tensor_route.h"
#include "common/default_init.h"
#include "scheduler/planner.h"

namespace gcagent::agent {

// Whose contributions a sum merges, in this order (empty: every member, in rank order), and
// whether it is the slice's whole sum (encoded as its result) or a ring hop's partial sum.
struct SumShape {
  std::vector<uint32_t> order;
  bool final = true;
};

class OwnerSide {
 public:
  struct Slice {
    uint64_t job = 0, key = 0;
    uint32_t slice = 0;
    uint64_t iteration = 0;
  };
  // A node's contribution: its bytes and what keeps them alive (a copy of a peer's message,
  // or this node's own share where its coder left it).
  struct Contribution {
    std::shared_ptr<const void> pin;
    std::span<const std::byte> bytes;
    bool compressed = false;
    uint32_t contributors = 0;  // trainers it sums
  };
  using Shape = SumShape;
  // The route of a declared tensor; null once it is gone.
  using RouteOf = std::function<TensorRoute*(uint64_t job, uint64_t key)>;
  // A slice's sum, encoded (or why it could not be), the trainers it sums, and whether it is
  // the whole sum (the shape's `final`).
  using Ready =
      std::function<void(const Slice&, Result<SliceEncoding>, bool compressed, uint32_t contributors, bool final)>;
  // A contribution refused (a second one from a node, or one its codec cannot decode).
  using Refused = std::function<void(const std::string& why)>;

  // `planner` gets the merges' and encodes' timings, `sampler` the result residuals (shared
  // with the node's side: one encode in 64 of either is sampled).
  // Every merge and result encoding runs on `coder` (the host's, or a GPU's: the sums then
  // live in its memory).
  OwnerSide(uint32_t nodes, std::shared_ptr<LocalCoder> coder, scheduler::Planner& planner, ResidualSampler& sampler,
            RouteOf route_of, Ready ready, Refused refused);
  ~OwnerSide();

  // Every contribution to one sum names the same shape.
  void add(const Slice& slice, uint32_t from, Contribution contribution, Shape shape = {});

  // The nodes whose contributions make a sum (agent/membership/membership.h), all of them at first.
  // Drops every partial sum: they were made of another membership.
  void setMembers(std::vector<uint32_t> members);
  // Forgets the result residual of a slice this node no longer owns, and its ring hop's.
  void forgetResidual(uint64_t job, uint64_t key, uint32_t slice);

  // The result residuals (and ring hops') of a tensor's slices kept here, for a checkpoint.
  using Exported = std::function<void(Result<std::vector<ResidualPart>>)>;
  void exportResiduals(uint64_t job, uint64_t key, uint32_t slice_count, Exported done);
  // Puts a slice's result or hop residual (part.kind kResult or kHop) of `route`'s tensor
  // back, ahead of the slice's next encode.
  Status importResidual(uint64_t job, const TensorRoute& route, const ResidualPart& part);

  // Partial sums that can no longer complete: a tensor's up to `iteration`, or a job's.
  void dropSums(uint64_t job, uint64_t key, uint64_t iteration);
  void dropSums(uint64_t job);
  // A tensor re-declared with another wire format (its sums and residuals are moot), a job dropped.
  void forget(uint64_t job, uint64_t key, uint32_t slice_count);
  void forgetJob(uint64_t job);

  size_t pending() const { return sums_.size(); }
  // Adds, per rank, the slices owned here that still wait for that rank's contribution.
  void countWaiting(std::vector<double>& per_rank) const;

 private:
  struct Sum;
  using Id = std::tuple<uint64_t, uint64_t, uint32_t, uint64_t>;  // job, key, slice, iteration
  // Memory for a slice's sum of n elements where the coder works.
  Result<std::shared_ptr<float>> sumBuffer(size_t n);
  void mergeNext(const Id& id, Sum& sum, const TensorRoute& route);
  void onMerged(const Id& id, uint64_t serial, uint32_t from, uint32_t contributors, bool compressed, size_t bytes,
                double seconds, const Status& status);
  void encode(const Id& id, Sum& sum, const TensorRoute& route);
  void onEncoded(const Slice& s, bool compressed, uint32_t contributors, bool final, Result<KeyEncodings> encoded);

  uint32_t nodes_;
  std::vector<uint32_t> members_;  // ascending; a sum of the default shape merges them in this order
  std::shared_ptr<LocalCoder> coder_;
  scheduler::Planner& planner_;
  RouteOf route_of_;
  Ready ready_;
  Refused refused_;
  std::map<Id, Sum> sums_;
  uint64_t serials_ = 0;
  ResidualSampler& sampler_;
  // The coder's reports may run after this is gone; they reach it through this.
  std::shared_ptr<OwnerSide*> alive_;
};

}  // namespace gcagent::agent

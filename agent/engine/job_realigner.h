// How a job's nodes agree where its iterations go on after some were given up (a lost peer,
// a deadline, a trainer that connected again): each node's frontier (job_alignment.h),
// announced to every peer that has not heard it, and a peer's later frontier adopted here by
// giving up what is in flight below it. The engine is told which reductions to fail; the
// owner side drops the partial sums that can no longer complete.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "agent/engine/engine_state.h"
#include "agent/engine/owner_side.h"
#include "agent/wire/job_notice.h"
#include "common/status.h"
#include "metrics/stats.h"
#include "transport/transport.h"

namespace gcagent::agent {

class JobRealigner {
 public:
  // Fails the key's reduction in flight with `why`.
  using FailKey = std::function<void(uint64_t job, KeyState& k, const Status& why)>;

  JobRealigner(transport::Transport& transport, OwnerSide& owner, metrics::Stats& stats, FailKey fail);

  // Where the job goes on here: the lowest iteration in flight, else the one after the last
  // any key finished (completed or failed); what this node announces it gives up below.
  static uint64_t frontierOf(const JobState& js);
  // Sends `to` the job's frontier, unless it heard it already (or its link is down).
  void announce(uint64_t job, JobState& js, transport::Rank to);
  void announceToAll(uint64_t job, JobState& js);
  // A peer that came (back) up knows nothing: it hears every job's frontier anew.
  void peerUp(uint64_t job, JobState& js, transport::Rank peer);
  // Gives up the job's iterations below `next` here. True when that gave something up (a
  // realignment, counted).
  bool realign(uint64_t job, JobState& js, uint64_t next, const std::string& why);
  // Gives up everything in flight of the job here and tells every peer, so they give that
  // iteration up at once rather than at the reduction timeout. False: nothing was in flight.
  bool giveUpInFlight(uint64_t job, JobState& js, const std::string& why);
  // A peer's frontier: adopted when the job is declared here (`js`), else kept until it is.
  bool onNotice(transport::Rank from, const RealignNotice& notice, JobState* js);
  // A job declared here for the first time starts at the frontier heard before.
  void declared(uint64_t job, JobState& js);
  uint64_t realignments() const { return realignments_; }

 private:
  transport::Transport& transport_;
  OwnerSide& owner_;
  metrics::Stats& stats_;
  FailKey fail_;
  // A job's latest notice heard before it was declared here (a restarted agent's trainers
  // declare it anew): where its first step starts, and the reload called.
  std::unordered_map<uint64_t, RealignNotice> early_;
  uint64_t realignments_ = 0;
};

}  // namespace gcagent::agent

// When a job's trainers reload one node's weights after iterations were given up.
//
// No protocol can make a step complete on every node or on none: the last message of any
// commit can be lost with its link. A step given up on one node may therefore have completed
// on another (its results were already on their way), and the two nodes' models then differ
// by that step. gcagent repairs that rather than hide it: every iteration given up on any
// node calls for a reload, which every node hears (the realignment's notices carry it,
// job_realigner.h), and the first iteration from there that completes here tells the trainers
// to load the weights of one node (the membership's root, else its lowest member) before the
// next step. Every node completes that iteration alike, so they all reload at the same step;
// an iteration given up meanwhile calls for a later reload.
#pragma once

#include <cstdint>
#include <optional>

namespace gcagent::agent {

class JobReload {
 public:
  // An iteration below `from` was given up somewhere: reload after the first that completes
  // from there on.
  void call(uint64_t from) {
    if (from <= from_) return;
    from_ = from;
    if (at_ && *at_ < from) at_.reset();
  }
  // The iteration that completed here just now (on the wire): whether its trainers reload
  // after it. Every key of that iteration answers alike; a later iteration ends the call.
  bool completes(uint64_t iteration) {
    if (from_ == 0 || iteration < from_) return false;
    if (!at_) at_ = iteration;
    if (iteration == *at_) return true;
    from_ = 0;
    at_.reset();
    return false;
  }
  // What notices carry (0: no reload called, or it happened).
  uint64_t from() const { return from_; }

 private:
  uint64_t from_ = 0;
  std::optional<uint64_t> at_;
};

}  // namespace gcagent::agent

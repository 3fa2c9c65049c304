// How a job's iterations line up across its nodes after a loss. Trainers number their steps
// themselves, and after a failure those numbers drift apart: trainers beside healthy agents
// fail steps at once while a peer is away, those beside a frozen agent wait. The nodes then
// continue at the furthest node's next iteration. Each node announces its frontier (the
// lowest iteration it can still complete) when a link comes up, when it gives an iteration
// up, and to a peer that sends a slice of an iteration it gave up; a node that hears of a
// later one gives up everything below it and maps its trainers' next step onto it with an
// offset: wire iteration = trainer iteration + offset, the same offset for every key of the
// job, so a step's tensors stay together. Iterations below the agreed one fail at once.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/status.h"
#include "common/str_cat.h"

namespace gcagent::agent {

class JobAlignment {
 public:
  // The wire iteration of a trainer's `iteration`, or why it was given up.
  Result<uint64_t> start(uint64_t iteration) {
    // The first step maps onto the agreed iteration, whatever the trainers call it.
    if (!started_ && iteration + offset_ < floor_) offset_ = floor_ - iteration;
    const uint64_t wire = iteration + offset_;
    started_ = true;
    if (iteration > newest_) newest_failed_ = false;
    newest_ = std::max(newest_, iteration);
    if (wire < floor_) {
      failed(iteration);
      return Status::unavailable(strCat("iteration ", iteration, " was given up to realign with the other nodes; the job "
                                        "goes on from this node's iteration ", floor_ - offset_));
    }
    return wire;
  }
  // A tensor of the trainers' `iteration` failed (or was refused) here.
  void failed(uint64_t iteration) {
    if (iteration == newest_) newest_failed_ = true;
  }

  // Another node continues at wire iteration `next`: nothing below it completes any more.
  // True when that is news (the floor rose). The trainers' next step (after the newest one
  // started, or their first) then maps onto `next` at the earliest. With `fail_next_step`
  // (their newest step completed here, so they know of no failure yet) the step after the
  // newest is one the other nodes gave up: it fails at once, as it did there, and the one
  // after it maps onto `next`.
  bool adopt(uint64_t next, bool fail_next_step = false) {
    if (next <= floor_) return false;
    floor_ = next;
    const uint64_t first_kept = newest_ + (fail_next_step ? 2 : 1);
    if (started_ && first_kept + offset_ < next) offset_ = next - first_kept;
    return true;
  }
  // Whether a tensor of the newest trainer iteration started failed here.
  bool newestFailed() const { return newest_failed_; }
  // Whether the trainers' next step (after the newest one started) is given up already.
  bool nextGivenUp() const { return started_ && newest_ + 1 + offset_ < floor_; }

  // The wire iteration start(iteration) would give now, without starting it (0: given up).
  // A trainer that picks what it sends by the job's iteration (DiLoCo's fragment turns) asks
  // this before it submits.
  uint64_t peek(uint64_t iteration) const {
    const uint64_t offset = !started_ && iteration + offset_ < floor_ ? floor_ - iteration : offset_;
    return iteration + offset < floor_ ? 0 : iteration + offset;
  }

  uint64_t floor() const { return floor_; }
  uint64_t offset() const { return offset_; }
  // A trainer's iteration on the wire, and back (0 for one below the offset).
  uint64_t toWire(uint64_t trainer_iteration) const { return trainer_iteration + offset_; }
  uint64_t toTrainer(uint64_t wire_iteration) const { return wire_iteration > offset_ ? wire_iteration - offset_ : 0; }

 private:
  uint64_t offset_ = 0;
  uint64_t floor_ = 0;   // wire iterations below it are given up
  uint64_t newest_ = 0;  // the newest trainer iteration started
  bool newest_failed_ = false;
  bool started_ = false;
};

}  // namespace gcagent::agent

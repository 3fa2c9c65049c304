// What an agent that did not run for longer than its peers wait (a stopped or starved
// process) asks them before it completes a step in flight: while it was away they may have
// declared it lost and given that step up, and the results it finds waiting would then
// complete the step here alone. A peer answers with the newest iteration in the range that
// it gave up, if any. Peer frames (agent/wire/peer_frame.h) of the fields frameFields lists.
#pragma once

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "common/status.h"
#include "common/str_cat.h"

namespace gcagent::agent {

// The asker's wire iterations [from, to] of the job whose outcome it holds (to: no end).
struct OutcomeQuery {
  uint64_t job = 0;
  uint64_t from = 0;
  uint64_t to = 0;
  bool operator==(const OutcomeQuery&) const = default;
};

// The answer for the asked range: whether the sender gave any of it up (failed it or
// realigned past it), and the newest such iteration; or that it holds no such job (its
// trainers left, and the job notice it sent was lost with the link).
struct OutcomeAnswer {
  uint64_t job = 0;
  uint64_t from = 0;
  uint64_t to = 0;
  uint8_t gave_up = 0;  // 0 or 1
  uint64_t newest_given_up = 0;  // when gave_up: within [from, to]
  uint8_t job_unknown = 0;  // 0 or 1
  bool operator==(const OutcomeAnswer&) const = default;
};

template <class M, class F>
  requires std::same_as<std::remove_const_t<M>, OutcomeQuery>
void frameFields(M& m, F& f) {
  f.num(m.job);
  f.num(m.from);
  f.num(m.to);
}

template <class M, class F>
  requires std::same_as<std::remove_const_t<M>, OutcomeAnswer>
void frameFields(M& m, F& f) {
  f.num(m.job);
  f.num(m.from);
  f.num(m.to);
  f.num(m.gave_up);
  f.num(m.newest_given_up);
  f.num(m.job_unknown);
}

inline Status checkFrame(const OutcomeQuery& q, uint32_t) {
  if (q.from > q.to) return Status::invalidArgument(strCat("iterations from ", q.from, " to ", q.to, ": an empty range"));
  return {};
}

inline Status checkFrame(const OutcomeAnswer& a, uint32_t) {
  if (a.from > a.to) return Status::invalidArgument(strCat("iterations from ", a.from, " to ", a.to, ": an empty range"));
  if (a.gave_up > 1) return Status::invalidArgument(strCat("gave_up flag ", int{a.gave_up}, ", not 0 or 1"));
  if (a.job_unknown > 1) return Status::invalidArgument(strCat("job_unknown flag ", int{a.job_unknown}, ", not 0 or 1"));
  if (a.job_unknown && a.gave_up) return Status::invalidArgument("gave_up set for a job it says it does not hold");
  if (a.gave_up && (a.newest_given_up < a.from || a.newest_given_up > a.to))
    return Status::invalidArgument(strCat("iteration given up ", a.newest_given_up, " is outside the asked range ",
                                          a.from, "..", a.to));
  return {};
}

}  // namespace gcagent::agent

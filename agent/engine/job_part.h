// A part of the agent that keeps state of jobs: the control server (its trainers' waits), the
// reduction engine (its reductions, owner sums and, through its coders, residuals). The job
// registry reaches every part when a job fails or goes, so no part is forgotten.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace gcagent::agent {

class JobPart {
 public:
  virtual ~JobPart() = default;
  // The job's work in flight cannot complete (a trainer or peer is gone, the agent stops):
  // fail it with `why`. The job itself stays.
  virtual void failJob(uint64_t job, const Status& why) = 0;
  // The job is gone (its last local trainer left): forget everything kept for it.
  virtual void dropJob(uint64_t job) = 0;
};

}  // namespace gcagent::agent

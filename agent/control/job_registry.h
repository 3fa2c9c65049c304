// Every job this agent serves, in one table, and the one place where a job fails or goes.
// The control server finds and creates jobs here as its trainers say hello; a job's failure
// (a trainer left, a peer's notice, the agent stopping) and its end (its last trainer left)
// reach every attached part in the order they were attached: the trainers' waits first, then
// the engine's reductions, whose owner sums and coders' residuals follow from it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/engine/job_part.h"
#include "agent/control/local_job.h"
#include "common/status.h"

namespace gcagent::agent {

class JobRegistry {
 public:
  // Parts are reached in attach order; they must outlive the registry's calls.
  void attach(JobPart& part) { parts_.push_back(&part); }

  // The job `name`, made for `local_size` trainers when it is new; null, with `error` set,
  // when another job has its id or the job has another local size.
  std::shared_ptr<LocalJob> findOrCreate(const std::string& name, uint32_t local_size, Status* error);
  // Null when the job is not (or no longer) served here.
  std::shared_ptr<LocalJob> find(uint64_t id) const;
  const LocalJobs& jobs() const { return jobs_; }

  // Fails the job's work in flight in every part; fail(why) fails every job's.
  void fail(uint64_t job, const Status& why);
  void failAll(const Status& why);
  // Every part forgets the job, then the table does.
  void drop(uint64_t job);

 private:
  std::vector<JobPart*> parts_;
  LocalJobs jobs_;
};

}  // namespace gcagent::agent

// Every job this agent serves, in one table, and the one place where a job is declared, fails
// or goes. The control server finds and creates jobs here as its trainers say hello; a job's
// tensors are handed to the engine here, whose routes the job keeps; a job's failure
// (a trainer left, a peer's notice, the agent stopping) and its end (its last trainer left)
// reach every attached part in the order they were attached: the trainers' waits first, then
// the engine's reductions, whose owner sums and coders' residuals follow from it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/engine/job_part.h"
#include "agent/control/local_job.h"
#include "agent/engine/tensor_route.h"
#include "common/status.h"
#include "shm/protocol.h"

namespace gcagent::agent {

class JobRegistry {
 public:
  // Takes a job's tensors and returns their routes (ReductionEngine::declareJob).
  using Declarer = std::function<Result<std::vector<DeclaredTensor>>(uint64_t job, const std::vector<TensorSpec>&)>;
  explicit JobRegistry(Declarer declarer) : declarer_(std::move(declarer)) {}

  // Parts are reached in attach order; they must outlive the registry's calls.
  void attach(JobPart& part) { parts_.push_back(&part); }

  // The job `name`, made for `local_size` trainers when it is new; null, with `error` set,
  // when another job has its id or the job has another local size.
  std::shared_ptr<LocalJob> findOrCreate(const std::string& name, uint32_t local_size, Status* error);
  // Null when the job is not (or no longer) served here.
  std::shared_ptr<LocalJob> find(uint64_t id) const;
  const LocalJobs& jobs() const { return jobs_; }

  // The job's tensors are (now) `tensors`, as a trainer declared them. Unchanged: nothing
  // happens. Changed: refused while a reduction of the job is in flight; else the declarer
  // takes them, the job keeps their routes and its generation moves on (the trainers that
  // declared the old tensors must declare again). The error names the tensor at fault.
  Status declare(LocalJob& job, const std::vector<shm::protocol::TensorDecl>& tensors);
  // Fails the job's work in flight in every part; fail(why) fails every job's.
  void fail(uint64_t job, const Status& why);
  void failAll(const Status& why);
  // Every part forgets the job, then the table does.
  void drop(uint64_t job);

 private:
  Declarer declarer_;
  std::vector<JobPart*> parts_;
  LocalJobs jobs_;
};

}  // namespace gcagent::agent

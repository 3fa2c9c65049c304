#include "agent/control/job_registry.h"

#include "agent/engine/reduction_policy.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::agent {

std::shared_ptr<LocalJob> JobRegistry::findOrCreate(const std::string& name, uint32_t local_size, Status* error) {
  return findOrCreateJob(jobs_, name, local_size, error);
}

Status JobRegistry::declare(LocalJob& job, const std::vector<shm::protocol::TensorDecl>& tensors) {
  if (tensors == job.tensors) return {};
  if (!job.pending.empty() || job.inFlight != 0)
    return Status::failedPrecondition(strCat("job '", job.name, "': tensors cannot change while a reduction is in flight"));
  std::vector<TensorSpec> specs;
  for (const auto& t : tensors) {
    compress::Params params(t.params.begin(), t.params.end());
    auto policy = takeReductionPolicy(params);  // what is left is the codec's
    if (!policy.ok()) return Status::invalidArgument(strCat("tensor ", t.key, ": ", policy.status().message()));
    if (policy->contributor && *policy->contributor >= job.local_size)
      return Status::invalidArgument(strCat("tensor ", t.key, ": reduce.contributor ", *policy->contributor,
                                            " is not a local rank of job '", job.name, "' (", job.local_size,
                                            " local trainers)"));
    specs.push_back({t.key, t.elements, t.priority, {t.codec, std::move(params)}, *policy});
  }
  GC_ASSIGN_OR_RETURN(std::vector<DeclaredTensor> declared, declarer_(job.id, specs));
  job.routesDeclared(declared);
  job.tensors = tensors;
  ++job.generation;
  GC_LOG(kInfo, "control", "job '", job.name, "': ", tensors.size(), " tensors declared (generation ",
         job.generation, ")");
  return {};
}

std::shared_ptr<LocalJob> JobRegistry::find(uint64_t id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second;
}

void JobRegistry::fail(uint64_t job, const Status& why) {
  for (JobPart* part : parts_) part->failJob(job, why);
}

void JobRegistry::failAll(const Status& why) {
  std::vector<uint64_t> ids;
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  for (uint64_t id : ids) fail(id, why);
}

void JobRegistry::drop(uint64_t job) {
  for (JobPart* part : parts_) part->dropJob(job);
  jobs_.erase(job);
}

}  // namespace gcagent::agent

#include "agent/control/job_registry.h"

namespace gcagent::agent {

std::shared_ptr<LocalJob> JobRegistry::findOrCreate(const std::string& name, uint32_t local_size, Status* error) {
  return findOrCreateJob(jobs_, name, local_size, error);
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

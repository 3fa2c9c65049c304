#include "agent/control/local_job.h"

#include <algorithm>

#include "agent/engine/reduction_engine.h"
#include "common/str_cat.h"

namespace gcagent::agent {

Joined LocalJob::contribute(uint32_t local_rank, uint64_t iteration, uint64_t key, Contribution mine) {
  Joined joined;
  for (auto it = pending.begin(); it != pending.end();) {
    const auto [other, k] = it->first;
    if (k != key || other == iteration) {
      ++it;
    } else if (other > iteration) {
      joined.behind = true;  // a local trainer is at `other` already
      return joined;
    } else {
      joined.given_up.push_back(other);  // this trainer will never submit `other` again
      it = pending.erase(it);
    }
  }
  auto& entries = pending[{iteration, key}];
  entries.resize(local_size);
  entries[local_rank] = std::move(mine);
  for (const Contribution& c : entries)
    if (c.host == nullptr) return joined;
  joined.ready = std::move(entries);
  pending.erase({iteration, key});
  return joined;
}

bool LocalJob::keyCompleted(uint64_t iteration) {
  const size_t keys = keys_per_iteration != 0 ? keys_per_iteration : tensors.size();
  if (++keys_done[iteration] < keys) return false;
  keys_done.erase(iteration);
  last_completed = std::max(last_completed, iteration);
  return true;
}

void LocalJob::reductionStarted(uint64_t iteration) {
  ++keys_started[iteration];
  for (auto it = keys_started.begin(); it != keys_started.end() && it->first < iteration;) {
    keys_per_iteration = it->second;
    it = keys_started.erase(it);
  }
}

void LocalJob::loseAfter(uint64_t after, const Status& why) {
  if (!lost.ok()) return;
  lost = why;
  lost_after = after;
}

bool LocalJob::deserted() const {
  return std::all_of(members.begin(), members.end(), [](TrainerSession* s) { return s == nullptr; });
}

std::shared_ptr<LocalJob> findOrCreateJob(LocalJobs& jobs, const std::string& name, uint32_t local_size,
                                          Status* error) {
  const uint64_t id = jobIdOf(name);
  auto& job = jobs[id];
  if (!job) {
    job = std::make_shared<LocalJob>();
    job->name = name;
    job->id = id;
    job->local_size = local_size;
    job->members.assign(local_size, nullptr);
  } else if (job->name != name) {
    *error = Status::failedPrecondition(strCat("job '", name, "' collides with job '", job->name, "'"));
    return nullptr;
  } else if (job->local_size != local_size) {
    *error = Status::invalidArgument(strCat("job '", name, "' has ", job->local_size,
                                            " local trainers, this one says ", local_size));
    return nullptr;
  }
  return job;
}

}  // namespace gcagent::agent

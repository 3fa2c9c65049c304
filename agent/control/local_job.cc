#include "agent/control/local_job.h"

#include <algorithm>

#include "agent/engine/reduction_engine.h"
#include "common/log.h"
#include "common/str_cat.h"

namespace gcagent::agent {

namespace {

// Every tensor's placement under `slots`, once every local trainer declared; none before.
std::unordered_map<uint64_t, TensorPlacement> placed(const LocalJob& job,
                                                     const std::vector<std::optional<MemberSlots>>& slots) {
  std::unordered_map<uint64_t, TensorPlacement> out;
  std::vector<MemberSlots> members;
  for (const auto& s : slots) {
    if (!s) return out;
    members.push_back(*s);
  }
  // A tensor one trainer contributes reduces where that trainer's gradient is.
  for (const auto& [key, route] : job.routes)
    out[key] = route.contributor && *route.contributor < members.size()
                   ? placeTensor({members[*route.contributor]}, route.device_coded)
                   : placeTensor(members, route.device_coded);
  return out;
}

}  // namespace

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
  // A tensor one trainer contributes (reduce.contributor) is ready with that trainer's.
  if (auto route = routes.find(key); route != routes.end() && route->second.contributor) {
    joined.ready = std::vector<Contribution>{std::move(mine)};
    return joined;
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

void LocalJob::routesDeclared(const std::vector<DeclaredTensor>& declared) {
  routes.clear();
  for (const DeclaredTensor& t : declared) routes[t.key] = t;
  placements = placed(*this, slots);
}

Status LocalJob::checkContributor(uint32_t local_rank, uint64_t key) const {
  auto route = routes.find(key);
  if (route == routes.end() || !route->second.contributor || *route->second.contributor == local_rank) return {};
  return Status::invalidArgument(strCat("tensor ", key, " is contributed by local rank ", *route->second.contributor,
                                        " alone (reduce.contributor); local rank ", local_rank, " submitted it"));
}

Status LocalJob::checkSlots(uint32_t local_rank, const MemberSlots& mine) const {
  if (inFlight == 0 && pending.empty()) return {};
  std::vector<std::optional<MemberSlots>> next = slots;
  next.resize(std::max<size_t>(next.size(), local_size));
  next[local_rank] = mine;
  // Only a placement in force can move; one decided by this declaration is new.
  const auto now = placed(*this, next);
  const bool moves = std::any_of(placements.begin(), placements.end(), [&](const auto& entry) {
    auto it = now.find(entry.first);
    return it != now.end() && it->second != entry.second;
  });
  if (!moves) return {};
  return Status::failedPrecondition(strCat("job '", name, "': local rank ", local_rank,
                                           " cannot move its tensors between host and GPU while a reduction is in "
                                           "flight"));
}

void LocalJob::declareSlots(uint32_t local_rank, MemberSlots mine) {
  slots.resize(std::max<size_t>(slots.size(), local_size));
  slots[local_rank] = std::move(mine);
  auto next = placed(*this, slots);
  if (next == placements) return;
  placements = std::move(next);
  std::map<Placement, size_t> count;
  for (const auto& [key, p] : placements) ++count[p.where];
  std::string where;
  for (const auto& [p, n] : count) where += strCat(where.empty() ? "" : ", ", n, " ", describe(p));
  GC_LOG(kInfo, "control", "job '", name, "': its tensors reduce ", where);
}

const TensorPlacement& LocalJob::placementOf(uint64_t key) const {
  static const TensorPlacement on_host;
  auto it = placements.find(key);
  return it == placements.end() ? on_host : it->second;
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
    job->slots.assign(local_size, std::nullopt);
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

#include "agent/control/device_staging.h"

#include <memory>

#include "agent/control/trainer_session.h"

namespace gcagent::agent {

void stageDeviceSlots(const std::vector<Contribution>& ready, std::function<void(const Status&)> then) {
  struct Staging {
    size_t left = 0;
    Status first_error;
    std::vector<std::weak_ptr<TrainerSession>> owners;  // the buffers' trainers
    std::function<void(const Status&)> then;
  };
  auto staged = std::make_shared<Staging>();
  for (const Contribution& c : ready) {
    staged->left += c.device != nullptr;
    staged->owners.push_back(c.session);
  }
  staged->then = std::move(then);
  auto done = [staged](const Status& st) {
    if (!st.ok() && staged->first_error.ok()) staged->first_error = st;
    if (--staged->left != 0) return;
    Status why = staged->first_error;
    // A trainer that left meanwhile took its buffer with it.
    for (const auto& owner : staged->owners) {
      auto session = owner.lock();
      if (why.ok() && (!session || session->closed())) why = Status::unavailable("a trainer of the job left");
    }
    staged->then(why);
  };
  for (const Contribution& c : ready) {
    if (c.device == nullptr) continue;
    if (auto session = c.session.lock()) {
      session->stageIn(c.index, c.elements, done);
    } else {
      done(Status::unavailable("a trainer of the job left"));
    }
  }
}

}  // namespace gcagent::agent

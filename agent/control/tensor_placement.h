// Where a declared tensor reduces on this node, decided once from the job's declarations:
// each local trainer's slots (a shared-memory segment, or device slots on a GPU) and whether
// the tensor's route codes its gradients on a GPU (TensorRoute::device_coded). Re-decided only
// when a trainer declares again; every reduction and every completion reads it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gcagent::agent {

class LocalCoder;

// One local trainer's slots, as its declaration made them.
struct MemberSlots {
  bool device = false;                // device slots (with host buffers), else a segment
  std::shared_ptr<LocalCoder> coder;  // of the device slots' GPU; null: they only stage
  bool operator==(const MemberSlots&) const = default;
};

enum class Placement {
  kHost,    // every trainer's gradient is in shared memory: reduced there
  kDevice,  // every one is in device slots of one GPU with a coder: coded there, the result too
  kStaged,  // device slots copied into their host buffers, reduced there, copied back
};

struct TensorPlacement {
  Placement where = Placement::kHost;
  std::shared_ptr<LocalCoder> coder;  // kDevice's
  bool operator==(const TensorPlacement&) const = default;
};

// On the GPU's coder when every trainer's slots are device slots of that one coder and the
// route codes the tensor on a GPU; on the host when every trainer's are in shared memory;
// staged otherwise. `members` holds every local trainer's slots.
TensorPlacement placeTensor(const std::vector<MemberSlots>& members, bool device_coded);

// For the log: "on the host", "on the GPU", "staged through the host".
std::string describe(Placement where);

}  // namespace gcagent::agent

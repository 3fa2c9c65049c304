#include "agent/control/tensor_placement.h"

#include <algorithm>

namespace gcagent::agent {

TensorPlacement placeTensor(const std::vector<MemberSlots>& members, bool device_coded) {
  if (members.empty() || std::none_of(members.begin(), members.end(), [](const MemberSlots& m) { return m.device; }))
    return {Placement::kHost, nullptr};
  const std::shared_ptr<LocalCoder>& coder = members.front().coder;
  const bool one_coder = coder != nullptr && std::all_of(members.begin(), members.end(), [&](const MemberSlots& m) {
    return m.device && m.coder == coder;
  });
  if (one_coder && device_coded) return {Placement::kDevice, coder};
  return {Placement::kStaged, nullptr};
}

std::string describe(Placement where) {
  switch (where) {
    case Placement::kHost: return "on the host";
    case Placement::kDevice: return "on the GPU";
    case Placement::kStaged: return "staged through the host";
  }
  return "?";
}

}  // namespace gcagent::agent

#include "agent/wire/slice_message.h"

#include "common/str_cat.h"

namespace gcagent::agent {

Status checkFrame(const SliceMessage& m, uint32_t world) {
  const auto kind = static_cast<uint8_t>(m.kind), topology = static_cast<uint8_t>(m.topology);
  if (kind != 1 && kind != 2) return Status::invalidArgument(strCat("unknown kind ", int{kind}));
  if (topology > static_cast<uint8_t>(Topology::kAllgather))
    return Status::invalidArgument(strCat("unknown topology ", int{topology}));
  if (m.slice_count == 0 || m.slice >= m.slice_count)
    return Status::invalidArgument(strCat("slice ", m.slice, " of ", m.slice_count));
  if (m.tensor_elements == 0 || m.tensor_elements < m.slice_count)
    return Status::invalidArgument(strCat(m.tensor_elements, " elements in ", m.slice_count, " slices"));
  if (m.contributors == 0) return Status::invalidArgument("zero contributors");
  if (m.view_proposer >= world)
    return Status::invalidArgument(strCat("view proposer ", m.view_proposer, " of ", world, " nodes"));
  return {};
}

}  // namespace gcagent::agent

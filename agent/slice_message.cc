#include "agent/slice_message.h"

#include "common/byte_io.h"
#include "common/str_cat.h"

namespace gcagent::agent {
namespace {
constexpr uint32_t kMagic = 0x53414347;  // "GCAS"
constexpr uint16_t kVersion = 3;  // 2: the view epoch; 3: its proposer
}  // namespace

std::vector<std::byte> encodeSliceHeader(const SliceMessage& m) {
  ByteWriter w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(static_cast<uint8_t>(m.kind));
  w.put(static_cast<uint8_t>(m.topology));
  w.put(m.job);
  w.put(m.key);
  w.put(m.iteration);
  w.put(m.slice);
  w.put(m.slice_count);
  w.put(m.tensor_elements);
  w.put(m.codec_fingerprint);
  w.put(m.contributors);
  w.put(m.view);
  w.put(m.view_proposer);
  return w.take();
}

Result<SliceMessage> parseSliceHeader(std::span<const std::byte> bytes) {
  if (bytes.size() != kSliceHeaderBytes)
    return Status::dataLoss(strCat("slice header: ", bytes.size(), " bytes, expected ", kSliceHeaderBytes));
  ByteReader r(bytes);
  uint32_t magic = 0;
  uint16_t version = 0;
  uint8_t kind = 0, topology = 0;
  SliceMessage m;
  r.get(magic);
  r.get(version);
  r.get(kind);
  r.get(topology);
  r.get(m.job);
  r.get(m.key);
  r.get(m.iteration);
  r.get(m.slice);
  r.get(m.slice_count);
  r.get(m.tensor_elements);
  r.get(m.codec_fingerprint);
  r.get(m.contributors);
  r.get(m.view);
  r.get(m.view_proposer);
  if (magic != kMagic) return Status::invalidArgument(strCat("slice header: bad magic 0x", std::hex, magic));
  if (version != kVersion) return Status::invalidArgument(strCat("slice header: version ", version, ", expected ", kVersion));
  if (kind != 1 && kind != 2) return Status::invalidArgument(strCat("slice header: unknown kind ", int{kind}));
  m.kind = static_cast<SliceKind>(kind);
  if (topology > static_cast<uint8_t>(Topology::kAllgather))
    return Status::invalidArgument(strCat("slice header: unknown topology ", int{topology}));
  m.topology = static_cast<Topology>(topology);
  if (m.slice_count == 0 || m.slice >= m.slice_count)
    return Status::invalidArgument(strCat("slice header: slice ", m.slice, " of ", m.slice_count));
  if (m.tensor_elements == 0 || m.tensor_elements < m.slice_count)
    return Status::invalidArgument(strCat("slice header: ", m.tensor_elements, " elements in ", m.slice_count, " slices"));
  if (m.contributors == 0) return Status::invalidArgument("slice header: zero contributors");
  return m;
}

}  // namespace gcagent::agent

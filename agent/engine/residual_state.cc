#include "agent/engine/residual_state.h"

#include <cstring>

#include "common/byte_io.h"
#include "common/str_cat.h"

namespace gcagent::agent {
namespace {

constexpr uint32_t kMagic = 0x53524347;  // "GCRS" in memory order
constexpr uint16_t kVersion = 1;
constexpr size_t kMaxName = 64;
constexpr uint32_t kMaxParts = 1u << 24;

}  // namespace

std::vector<std::byte> encodeResidualState(const ResidualState& state) {
  const ResidualLayout& l = state.layout;
  ByteWriter w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(uint16_t{0});
  w.put(l.key);
  w.put(l.elements);
  w.put(l.slice_elements);
  w.put(l.push_fp);
  w.put(l.pull_fp);
  w.putString(l.push_codec);
  w.putString(l.pull_codec);
  w.put(l.node_rank);
  w.put(l.node_count);
  w.put(l.topology);
  w.put(static_cast<uint32_t>(state.parts.size()));
  for (const ResidualPart& p : state.parts) {
    w.put(static_cast<uint8_t>(p.kind));
    w.put(p.slice);
    w.put(static_cast<uint64_t>(p.values.size()));
    w.putBytes(std::as_bytes(std::span<const float>(p.values)));
  }
  return w.take();
}

Result<ResidualState> decodeResidualState(std::span<const std::byte> blob) {
  ByteReader r(blob);
  auto bad = [&](std::string_view why) {
    return Status::invalidArgument(strCat("error-feedback state: ", why));
  };
  auto truncated = [&] {
    return Status::dataLoss(strCat("error-feedback state: truncated near byte ", r.position(), " of ", blob.size()));
  };
  uint32_t magic = 0;
  uint16_t version = 0, reserved = 0;
  r.get(magic);
  r.get(version);
  r.get(reserved);
  if (r.failed()) return truncated();
  if (magic != kMagic) return bad("not a gcagent state (bad magic)");
  if (version != kVersion) return bad(strCat("version ", version, "; this agent reads version ", kVersion));
  ResidualState s;
  ResidualLayout& l = s.layout;
  r.get(l.key);
  r.get(l.elements);
  r.get(l.slice_elements);
  r.get(l.push_fp);
  r.get(l.pull_fp);
  for (std::string* name : {&l.push_codec, &l.pull_codec}) {
    uint16_t length = 0;
    r.get(length);
    if (!r.failed() && length > kMaxName) return bad(strCat("codec name of ", length, " bytes"));
    r.getChars(*name, length);
  }
  r.get(l.node_rank);
  r.get(l.node_count);
  r.get(l.topology);
  uint32_t parts = 0;
  r.get(parts);
  if (r.failed()) return truncated();
  if (l.slice_elements == 0) return bad("zero slice elements");
  if (l.node_count == 0 || l.node_rank >= l.node_count)
    return bad(strCat("node rank ", l.node_rank, " of ", l.node_count, " nodes"));
  if (parts > kMaxParts) return bad(strCat(parts, " parts"));
  const uint64_t slices = (l.elements + l.slice_elements - 1) / l.slice_elements;
  for (uint32_t i = 0; i < parts; ++i) {
    ResidualPart p;
    uint8_t kind = 0;
    uint64_t floats = 0;
    r.get(kind);
    r.get(p.slice);
    r.get(floats);
    if (r.failed()) return truncated();
    if (kind < 1 || kind > 3) return bad(strCat("part ", i, ": unknown kind ", static_cast<int>(kind)));
    if (p.slice >= slices) return bad(strCat("part ", i, ": slice ", p.slice, " of a tensor of ", slices, " slices"));
    if (floats > r.remaining() / sizeof(float)) return truncated();
    p.kind = static_cast<ResidualKind>(kind);
    p.values.resize(floats);
    std::vector<std::byte> bytes;
    r.getBytes(bytes, floats * sizeof(float));
    if (!bytes.empty()) std::memcpy(p.values.data(), bytes.data(), bytes.size());
    s.parts.push_back(std::move(p));
  }
  if (r.remaining() != 0) return Status::dataLoss(strCat("error-feedback state: ", r.remaining(), " trailing bytes"));
  return s;
}

std::string mismatchOf(const ResidualLayout& saved, const ResidualLayout& declared) {
  if (saved.key != declared.key) return strCat("it is tensor ", saved.key, "'s");
  if (saved.elements != declared.elements)
    return strCat("it is of ", saved.elements, " elements; the tensor has ", declared.elements);
  if (saved.slice_elements != declared.slice_elements)
    return strCat("it was sliced by ", saved.slice_elements, " elements; this agent slices by ",
                  declared.slice_elements, " (scheduler.slice_elements)");
  if (saved.push_fp != declared.push_fp || saved.pull_fp != declared.pull_fp)
    return strCat("it is of codecs ", saved.push_codec, "/", saved.pull_codec, "; the tensor is declared with ",
                  declared.push_codec, "/", declared.pull_codec, " (a codec or one of its parameters differs)");
  return {};
}

bool sameOwnership(const ResidualLayout& saved, const ResidualLayout& declared) {
  return saved.node_rank == declared.node_rank && saved.node_count == declared.node_count &&
         saved.topology == declared.topology;
}

}  // namespace gcagent::agent

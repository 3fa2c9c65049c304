#include "agent/wire/peer_frame.h"

#include <cstring>
#include <string>
#include <type_traits>

#include "common/byte_io.h"
#include "common/str_cat.h"

namespace gcagent::agent {
namespace {

// Each kind's number and name, from its message type.
template <class M> struct KindOf;
template <> struct KindOf<SliceMessage> {
  static constexpr FrameKind kind = FrameKind::kSlice;
  static constexpr const char* name = "slice frame";
};
template <> struct KindOf<JobNotice> {
  static constexpr FrameKind kind = FrameKind::kJobNotice;
  static constexpr const char* name = "job notice";
};
template <> struct KindOf<RealignNotice> {
  static constexpr FrameKind kind = FrameKind::kRealign;
  static constexpr const char* name = "realign notice";
};
template <> struct KindOf<MembershipNotice> {
  static constexpr FrameKind kind = FrameKind::kMembership;
  static constexpr const char* name = "membership notice";
};
template <> struct KindOf<OutcomeQuery> {
  static constexpr FrameKind kind = FrameKind::kOutcomeQuery;
  static constexpr const char* name = "outcome query";
};
template <> struct KindOf<OutcomeAnswer> {
  static constexpr FrameKind kind = FrameKind::kOutcomeAnswer;
  static constexpr const char* name = "outcome answer";
};

class FieldWriter {
 public:
  explicit FieldWriter(ByteWriter& w) : w_(w) {}
  template <class T>
  void num(const T& v) {
    if constexpr (std::is_enum_v<T>) w_.put(static_cast<std::underlying_type_t<T>>(v));
    else w_.put(v);
  }
  void text(const std::string& s, size_t max) { w_.putString(std::string_view(s).substr(0, max)); }
  void ranks(const std::vector<uint32_t>& ranks) {
    w_.put(static_cast<uint16_t>(ranks.size()));
    for (uint32_t r : ranks) w_.put(r);
  }
  template <class T>
  void optional(const std::optional<T>& part) {
    w_.put(static_cast<uint8_t>(part.has_value()));
    if (part) frameFields(*part, *this);
  }

 private:
  ByteWriter& w_;
};

// Reads what FieldWriter wrote; counts are checked against the bytes left before anything is
// allocated, and the first problem sticks.
class FieldReader {
 public:
  explicit FieldReader(ByteReader& r) : r_(r) {}
  template <class T>
  void num(T& v) {
    if constexpr (std::is_enum_v<T>) {
      std::underlying_type_t<T> raw{};
      r_.get(raw);
      v = static_cast<T>(raw);
    } else {
      r_.get(v);
    }
  }
  void text(std::string& s, size_t max) {
    uint16_t length = 0;
    r_.get(length);
    if (!ok()) return;
    if (length > max) return invalid(strCat("a text of ", length, " bytes, more than ", max));
    r_.getChars(s, length);
  }
  void ranks(std::vector<uint32_t>& ranks) {
    uint16_t count = 0;
    r_.get(count);
    if (!ok() || !r_.expect(4u * count)) return;
    ranks.resize(count);
    for (uint32_t& rank : ranks) r_.get(rank);
  }
  template <class T>
  void optional(std::optional<T>& part) {
    uint8_t present = 0;
    r_.get(present);
    if (!ok()) return;
    if (present > 1) return invalid(strCat("optional part flag ", int{present}, ", not 0 or 1"));
    if (present) frameFields(part.emplace(), *this);
  }
  bool ok() const { return !r_.failed() && error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  void invalid(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }
  ByteReader& r_;
  std::string error_;
};

template <class M>
Result<PeerMessage> parseBody(std::span<const std::byte> body, uint32_t world) {
  const char* name = KindOf<M>::name;
  ByteReader r(body);
  FieldReader fields(r);
  M m{};
  frameFields(m, fields);
  if (!fields.error().empty()) return Status::invalidArgument(strCat(name, ": ", fields.error()));
  if (r.failed())
    return Status::dataLoss(strCat(name, ": body of ", body.size(), " bytes ends inside its fields"));
  if (r.remaining() != 0) return Status::dataLoss(strCat(name, ": ", r.remaining(), " bytes after its fields"));
  if constexpr (requires { checkFrame(m, world); }) {
    if (Status s = checkFrame(m, world); !s.ok()) return Status(s.code(), strCat(name, ": ", s.message()));
  }
  return PeerMessage{std::move(m)};
}

}  // namespace

std::vector<std::byte> encodePeerFrame(const PeerMessage& message) {
  ByteWriter w;
  w.put(kPeerFrameMagic);
  w.put(kPeerFrameVersion);
  std::visit([&w](const auto& m) { w.put(static_cast<uint8_t>(KindOf<std::decay_t<decltype(m)>>::kind)); }, message);
  w.put(uint16_t{0});
  w.put(uint32_t{0});  // the body's length, patched below
  FieldWriter fields(w);
  std::visit([&fields](const auto& m) { frameFields(m, fields); }, message);
  w.patchU32(8, static_cast<uint32_t>(w.size() - kPeerFrameHeaderBytes));
  return w.take();
}

std::optional<FrameKind> peerFrameKind(std::span<const std::byte> bytes) {
  uint32_t magic = 0;
  if (bytes.size() < kPeerFrameHeaderBytes) return std::nullopt;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  if (magic != kPeerFrameMagic) return std::nullopt;
  return static_cast<FrameKind>(bytes[5]);
}

Result<PeerMessage> parsePeerFrame(std::span<const std::byte> bytes, uint32_t world) {
  if (bytes.size() < kPeerFrameHeaderBytes)
    return Status::dataLoss(strCat("peer frame: ", bytes.size(), " bytes, shorter than its ", kPeerFrameHeaderBytes,
                                   "-byte header"));
  ByteReader r(bytes);
  uint32_t magic = 0, length = 0;
  uint8_t version = 0, kind = 0;
  uint16_t zero = 0;
  r.get(magic);
  r.get(version);
  r.get(kind);
  r.get(zero);
  r.get(length);
  if (magic != kPeerFrameMagic) return Status::invalidArgument(strCat("peer frame: bad magic 0x", std::hex, magic));
  if (version != kPeerFrameVersion)
    return Status::invalidArgument(strCat("peer frame: version ", int{version}, ", expected ", int{kPeerFrameVersion}));
  if (zero != 0) return Status::invalidArgument(strCat("peer frame: reserved field ", zero, ", not zero"));
  if (length != bytes.size() - kPeerFrameHeaderBytes)
    return Status::dataLoss(strCat("peer frame: body of ", length, " bytes, but ", bytes.size() - kPeerFrameHeaderBytes,
                                   " follow the header"));
  const auto body = bytes.subspan(kPeerFrameHeaderBytes);
  switch (static_cast<FrameKind>(kind)) {
    case FrameKind::kSlice: return parseBody<SliceMessage>(body, world);
    case FrameKind::kJobNotice: return parseBody<JobNotice>(body, world);
    case FrameKind::kRealign: return parseBody<RealignNotice>(body, world);
    case FrameKind::kMembership: return parseBody<MembershipNotice>(body, world);
    case FrameKind::kOutcomeQuery: return parseBody<OutcomeQuery>(body, world);
    case FrameKind::kOutcomeAnswer: return parseBody<OutcomeAnswer>(body, world);
  }
  return Status::invalidArgument(strCat("peer frame: unknown kind ", int{kind}));
}

}  // namespace gcagent::agent

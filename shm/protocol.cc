#include "shm/protocol.h"

#include <algorithm>
#include <unordered_set>

#include "common/byte_io.h"
#include "common/str_cat.h"

namespace gcagent::shm::protocol {
namespace {

constexpr uint16_t kLastType = static_cast<uint16_t>(MessageType::kIterationAnswer);

MessageType typeOf(const Body& body) { return static_cast<MessageType>(body.index() + 1); }

void putKeys(ByteWriter& w, const std::vector<uint64_t>& keys) {
  w.put(static_cast<uint32_t>(keys.size()));
  for (uint64_t k : keys) w.put(k);
}

template <size_t N>
void putBytes(ByteWriter& w, const std::array<uint8_t, N>& bytes) {
  for (uint8_t b : bytes) w.put(b);
}

void putTensors(ByteWriter& w, const std::vector<TensorDecl>& tensors) {
  w.put(static_cast<uint32_t>(tensors.size()));
  for (const auto& t : tensors) {
    w.put(t.key);
    w.put(t.elements);
    w.put(static_cast<uint8_t>(t.dtype));
    w.put(t.priority);
    w.putString(t.codec);
    w.put(static_cast<uint16_t>(t.params.size()));
    for (const auto& [k, v] : t.params) {
      w.putString(k);
      w.putString(v);
    }
  }
}

struct BodyWriter {
  ByteWriter& w;
  void operator()(const Hello& m) {
    w.putString(m.job);
    w.put(m.local_rank);
    w.put(m.local_size);
    w.put(m.pid);
  }
  void operator()(const Welcome& m) {
    w.put(m.trainer_id);
    w.put(m.node_rank);
    w.put(m.node_count);
    w.put(m.reduction_timeout_ms);
  }
  void operator()(const Declare& m) { putTensors(w, m.tensors); }
  void operator()(const DeclareDevice& m) {
    putBytes(w, m.gpu);
    putTensors(w, m.tensors);
  }
  void operator()(const DeclaredDevice& m) {
    w.put(static_cast<uint8_t>(m.kind));
    putBytes(w, m.gpu);
    w.put(m.allocation_bytes);
    putBytes(w, m.mem_handle);
    putBytes(w, m.ready_event);
    putBytes(w, m.done_event);
    putKeys(w, m.slot_offsets);
  }
  void operator()(const Declared& m) {
    w.putString(m.segment);
    w.put(m.segment_bytes);
    putKeys(w, m.slot_offsets);
  }
  void operator()(const Submit& m) {
    w.put(m.iteration);
    putKeys(w, m.keys);
  }
  void operator()(const Complete& m) {
    w.put(m.iteration);
    putKeys(w, m.keys);
    if (m.reload_root) w.put(*m.reload_root);
  }
  void operator()(const Error& m) {
    w.put(static_cast<uint16_t>(m.code));
    w.putString(m.message);
  }
  void operator()(const Ping&) {}
  void operator()(const Pong&) {}
  void operator()(const Membership& m) {
    w.put(m.epoch);
    w.put(m.node_count);
    if (m.members.empty()) return;  // the form before the member list
    for (uint32_t r : m.members) w.put(r);
    w.put(static_cast<uint32_t>(m.joined.size()));
    for (uint32_t r : m.joined) w.put(r);
  }
  void operator()(const StateGet& m) {
    w.put(m.key);
    w.put(m.offset);
  }
  void operator()(const StatePart& m) {
    w.put(m.key);
    w.put(m.total);
    w.put(m.offset);
    w.put(static_cast<uint64_t>(m.bytes.size()));
    w.putBytes(m.bytes);
  }
  void operator()(const StateStored& m) {
    w.put(m.key);
    w.put(m.received);
    w.put(m.dropped);
  }
  void operator()(const IterationQuery& m) { w.put(m.iteration); }
  void operator()(const IterationAnswer& m) {
    w.put(m.iteration);
    w.put(m.job_iteration);
  }
};

// Parses one body, remembering the first problem as a message that names the field.
class BodyParser {
 public:
  BodyParser(MessageType type, std::span<const std::byte> body) : type_(type), r_(body) {}

  Status finish() {
    if (!error_.empty()) return Status::invalidArgument(strCat(prefix(), error_));
    if (r_.failed())
      return Status::dataLoss(strCat(prefix(), "body truncated near byte ", r_.position(), " of ",
                                     r_.position() + r_.remaining()));
    if (r_.remaining() != 0)
      return Status::dataLoss(strCat(prefix(), "body has ", r_.remaining(), " trailing bytes"));
    return {};
  }

  bool ok() const { return error_.empty() && !r_.failed(); }

  void invalid(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }

  template <class T>
  T get() {
    T v{};
    r_.get(v);
    return v;
  }

  // A name: non-empty when required, bounded, no NUL or control characters.
  std::string name(std::string_view field, size_t max, bool required) {
    std::string s;
    const uint16_t length = get<uint16_t>();
    if (r_.failed()) return s;
    if (length > max) {
      invalid(strCat(field, " is longer than ", max, " bytes"));
      return s;
    }
    if (!r_.getChars(s, length)) return s;
    if (required && s.empty()) invalid(strCat(field, " is empty"));
    for (char c : s)
      if (static_cast<unsigned char>(c) < 0x20) {
        invalid(strCat(field, " contains a control character"));
        break;
      }
    return s;
  }

  std::vector<uint64_t> keys(std::string_view field, bool unique) {
    std::vector<uint64_t> out;
    uint32_t count = get<uint32_t>();
    if (count > kMaxTensors) {
      invalid(strCat(field, " count ", count, " exceeds ", kMaxTensors));
      return out;
    }
    if (!r_.expect(size_t{count} * 8)) return out;
    out.reserve(count);
    std::unordered_set<uint64_t> seen;
    for (uint32_t i = 0; i < count; ++i) {
      out.push_back(get<uint64_t>());
      if (unique && !seen.insert(out.back()).second) invalid(strCat(field, " repeats key ", out.back()));
    }
    return out;
  }

  size_t remaining() const { return r_.remaining(); }

  std::vector<std::byte> raw(size_t n) {
    std::vector<std::byte> out;
    r_.getBytes(out, n);
    return out;
  }

  template <size_t N>
  std::array<uint8_t, N> bytes() {
    std::array<uint8_t, N> out{};
    if (!r_.expect(N)) return out;
    for (auto& b : out) r_.get(b);
    return out;
  }

 private:
  std::string prefix() const { return strCat("control message '", messageTypeName(type_), "': "); }

  MessageType type_;
  ByteReader r_;
  std::string error_;
};

Hello parseHello(BodyParser& p) {
  Hello m;
  m.job = p.name("job name", kMaxJobName, true);
  m.local_rank = p.get<uint32_t>();
  m.local_size = p.get<uint32_t>();
  m.pid = p.get<uint32_t>();
  if (p.ok() && (m.local_size == 0 || m.local_size > kMaxLocalSize))
    p.invalid(strCat("local size ", m.local_size, " is outside [1, ", kMaxLocalSize, "]"));
  if (p.ok() && m.local_rank >= m.local_size)
    p.invalid(strCat("local rank ", m.local_rank, " is not below the local size ", m.local_size));
  return m;
}

Welcome parseWelcome(BodyParser& p) {
  Welcome m;
  m.trainer_id = p.get<uint32_t>();
  m.node_rank = p.get<uint32_t>();
  m.node_count = p.get<uint32_t>();
  if (p.ok() && m.node_rank >= m.node_count)
    p.invalid(strCat("node rank ", m.node_rank, " is not below the node count ", m.node_count));
  if (p.ok() && p.remaining() >= sizeof(uint32_t)) m.reduction_timeout_ms = p.get<uint32_t>();  // an older agent sends none
  return m;
}

std::vector<TensorDecl> parseTensors(BodyParser& p) {
  std::vector<TensorDecl> m;
  uint32_t count = p.get<uint32_t>();
  if (p.ok() && (count == 0 || count > kMaxTensors)) {
    p.invalid(strCat("tensor count ", count, " is outside [1, ", kMaxTensors, "]"));
    return m;
  }
  std::unordered_set<uint64_t> keys;
  for (uint32_t i = 0; i < count && p.ok(); ++i) {
    TensorDecl t;
    const std::string at = strCat("tensor ", i, ": ");
    t.key = p.get<uint64_t>();
    t.elements = p.get<uint64_t>();
    uint8_t dtype = p.get<uint8_t>();
    t.priority = p.get<int32_t>();
    t.codec = p.name(at + "codec name", kMaxCodecName, false);
    uint16_t params = p.get<uint16_t>();
    if (!p.ok()) break;
    if (!keys.insert(t.key).second) p.invalid(strCat(at, "repeats key ", t.key));
    if (t.elements == 0 || t.elements > kMaxElements)
      p.invalid(strCat(at, "element count ", t.elements, " is outside [1, 2^40]"));
    if (dtype < static_cast<uint8_t>(DType::kFloat32) || dtype > static_cast<uint8_t>(DType::kFloat16))
      p.invalid(strCat(at, "unknown dtype ", static_cast<int>(dtype), " (1 = float32, 2 = bfloat16, 3 = float16)"));
    t.dtype = static_cast<DType>(dtype);
    if (params > kMaxParams) {
      p.invalid(strCat(at, params, " codec parameters exceed ", kMaxParams));
      break;
    }
    for (uint16_t j = 0; j < params && p.ok(); ++j) {
      std::string key = p.name(at + "parameter name", kMaxParamKey, true);
      std::string value = p.name(at + "parameter value", kMaxParamValue, false);
      t.params.emplace_back(std::move(key), std::move(value));
    }
    m.push_back(std::move(t));
  }
  return m;
}

Declare parseDeclare(BodyParser& p) { return Declare{parseTensors(p)}; }

template <size_t N>
bool allZero(const std::array<uint8_t, N>& bytes) {
  for (uint8_t b : bytes)
    if (b != 0) return false;
  return true;
}

DeclareDevice parseDeclareDevice(BodyParser& p) {
  DeclareDevice m;
  m.gpu = p.bytes<kGpuUuidBytes>();
  if (p.ok() && allZero(m.gpu)) p.invalid("gpu uuid is all zeros");
  m.tensors = parseTensors(p);
  return m;
}

DeclaredDevice parseDeclaredDevice(BodyParser& p) {
  DeclaredDevice m;
  const uint8_t kind = p.get<uint8_t>();
  m.gpu = p.bytes<kGpuUuidBytes>();
  m.allocation_bytes = p.get<uint64_t>();
  m.mem_handle = p.bytes<kIpcHandleBytes>();
  m.ready_event = p.bytes<kIpcHandleBytes>();
  m.done_event = p.bytes<kIpcHandleBytes>();
  m.slot_offsets = p.keys("slot offset", false);
  if (!p.ok()) return m;
  m.kind = static_cast<DeviceHandleKind>(kind);
  if (kind != static_cast<uint8_t>(DeviceHandleKind::kPosixFd) && kind != static_cast<uint8_t>(DeviceHandleKind::kLegacyIpc))
    p.invalid(strCat("unknown device handle kind ", static_cast<int>(kind), " (1 = posix fd, 2 = legacy ipc)"));
  else if (allZero(m.gpu))
    p.invalid("gpu uuid is all zeros");
  else if (m.allocation_bytes == 0 || m.allocation_bytes > kMaxDeviceBytes)
    p.invalid(strCat("allocation of ", m.allocation_bytes, " bytes is outside [1, 2^42]"));
  else if (m.kind == DeviceHandleKind::kPosixFd && !allZero(m.mem_handle))
    p.invalid("a posix fd allocation carries a legacy memory handle");
  else if (m.kind == DeviceHandleKind::kLegacyIpc && allZero(m.mem_handle))
    p.invalid("legacy ipc memory handle is all zeros");
  else if (m.slot_offsets.empty())
    p.invalid("no slots");
  for (uint64_t off : m.slot_offsets)
    if (p.ok() && off >= m.allocation_bytes) p.invalid(strCat("slot offset ", off, " is beyond the allocation"));
  return m;
}

Declared parseDeclared(BodyParser& p) {
  Declared m;
  m.segment = p.name("segment name", kMaxSegmentName, true);
  m.segment_bytes = p.get<uint64_t>();
  m.slot_offsets = p.keys("slot offset", false);
  for (uint64_t off : m.slot_offsets)
    if (p.ok() && off >= m.segment_bytes) p.invalid(strCat("slot offset ", off, " is beyond the segment"));
  return m;
}

template <class M>
M parseKeys(BodyParser& p) {
  M m;
  m.iteration = p.get<uint64_t>();
  m.keys = p.keys("key", true);
  if (p.ok() && m.keys.empty()) p.invalid("no keys");
  return m;
}

Complete parseComplete(BodyParser& p) {
  Complete m = parseKeys<Complete>(p);
  if (p.ok() && p.remaining() >= sizeof(uint32_t)) m.reload_root = p.get<uint32_t>();  // an older agent sends none
  if (p.ok() && m.reload_root && *m.reload_root >= kMaxNodes) p.invalid(strCat("reload root ", *m.reload_root));
  return m;
}

Membership parseMembership(BodyParser& p) {
  Membership m;
  m.epoch = p.get<uint32_t>();
  m.node_count = p.get<uint32_t>();
  if (p.ok() && m.node_count == 0) p.invalid("zero nodes");
  if (!p.ok() || p.remaining() == 0) return m;  // an agent before the member list
  if (m.node_count > kMaxNodes) {
    p.invalid(strCat(m.node_count, " nodes, more than ", kMaxNodes));
    return m;
  }
  auto ranks = [&](uint32_t count, const char* what) {
    std::vector<uint32_t> out;
    for (uint32_t i = 0; i < count && p.ok(); ++i) {
      out.push_back(p.get<uint32_t>());
      if (p.ok() && i > 0 && out[i] <= out[i - 1]) p.invalid(strCat(what, " ranks not ascending"));
    }
    return out;
  };
  m.members = ranks(m.node_count, "member");
  const uint32_t joined = p.get<uint32_t>();
  if (p.ok() && joined > m.node_count) p.invalid(strCat(joined, " joined nodes of ", m.node_count));
  if (p.ok()) m.joined = ranks(joined, "joined");
  for (uint32_t r : m.joined)
    if (p.ok() && !std::binary_search(m.members.begin(), m.members.end(), r))
      p.invalid(strCat("joined node ", r, " is no member"));
  return m;
}

StateGet parseStateGet(BodyParser& p) {
  StateGet m;
  m.key = p.get<uint64_t>();
  m.offset = p.get<uint64_t>();
  if (p.ok() && m.offset >= kMaxStateBytes) p.invalid(strCat("offset ", m.offset, " is beyond 2^40"));
  return m;
}

StatePart parseStatePart(BodyParser& p) {
  StatePart m;
  m.key = p.get<uint64_t>();
  m.total = p.get<uint64_t>();
  m.offset = p.get<uint64_t>();
  const uint64_t bytes = p.get<uint64_t>();
  if (!p.ok()) return m;
  if (m.total > kMaxStateBytes) p.invalid(strCat("total of ", m.total, " bytes is beyond 2^40"));
  else if (bytes > kMaxStatePartBytes) p.invalid(strCat("part of ", bytes, " bytes is beyond ", kMaxStatePartBytes));
  else if (m.offset > m.total || bytes > m.total - m.offset)
    p.invalid(strCat("part [", m.offset, ", ", m.offset + bytes, ") is beyond the total of ", m.total, " bytes"));
  else if (bytes == 0 && m.total != 0) p.invalid("empty part of a non-empty state");
  else m.bytes = p.raw(bytes);
  return m;
}

StateStored parseStateStored(BodyParser& p) {
  StateStored m;
  m.key = p.get<uint64_t>();
  m.received = p.get<uint64_t>();
  m.dropped = p.get<uint32_t>();
  if (p.ok() && m.received > kMaxStateBytes) p.invalid(strCat("received ", m.received, " bytes, beyond 2^40"));
  return m;
}

IterationQuery parseIterationQuery(BodyParser& p) {
  IterationQuery m;
  m.iteration = p.get<uint64_t>();
  return m;
}

IterationAnswer parseIterationAnswer(BodyParser& p) {
  IterationAnswer m;
  m.iteration = p.get<uint64_t>();
  m.job_iteration = p.get<uint64_t>();
  return m;
}

Error parseError(BodyParser& p) {
  Error m;
  uint16_t code = p.get<uint16_t>();
  m.message = p.name("error message", kMaxErrorMessage, false);
  if (p.ok() && (code == 0 || code > static_cast<uint16_t>(StatusCode::kInternal)))
    p.invalid(strCat("unknown error code ", code));
  m.code = static_cast<StatusCode>(code);
  return m;
}

}  // namespace

size_t dtypeBytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }

std::string_view dtypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "float32";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
  }
  return "unknown";
}

std::string_view messageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kHello: return "hello";
    case MessageType::kWelcome: return "welcome";
    case MessageType::kDeclare: return "declare";
    case MessageType::kDeclared: return "declared";
    case MessageType::kSubmit: return "submit";
    case MessageType::kComplete: return "complete";
    case MessageType::kError: return "error";
    case MessageType::kDeclareDevice: return "declare device";
    case MessageType::kDeclaredDevice: return "declared device";
    case MessageType::kPing: return "ping";
    case MessageType::kPong: return "pong";
    case MessageType::kMembership: return "membership";
    case MessageType::kStateGet: return "state get";
    case MessageType::kStatePart: return "state part";
    case MessageType::kStateStored: return "state stored";
    case MessageType::kIterationQuery: return "iteration query";
    case MessageType::kIterationAnswer: return "iteration answer";
  }
  return "unknown";
}

std::vector<std::byte> encode(const Message& message) {
  ByteWriter w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(static_cast<uint16_t>(typeOf(message.body)));
  w.put(uint32_t{0});  // body length, patched below
  w.put(message.request_id);
  std::visit(BodyWriter{w}, message.body);
  w.patchU32(8, static_cast<uint32_t>(w.size() - kHeaderBytes));
  return w.take();
}

Result<Header> parseHeader(std::span<const std::byte> bytes) {
  ByteReader r(bytes);
  uint32_t magic = 0, body = 0, request = 0;
  uint16_t version = 0, type = 0;
  r.get(magic);
  r.get(version);
  r.get(type);
  r.get(body);
  r.get(request);
  if (r.failed() || r.remaining() != 0)
    return Status::dataLoss(strCat("control header: expected ", kHeaderBytes, " bytes, got ", bytes.size()));
  if (magic != kMagic)
    return Status::invalidArgument(strCat("control header: bad magic 0x", std::hex, magic, " (not a gcagent client?)"));
  if (version != kVersion)
    return Status::invalidArgument(strCat("control header: protocol version ", version, ", this agent speaks ", kVersion));
  if (type == 0 || type > kLastType) return Status::invalidArgument(strCat("control header: unknown message type ", type));
  if (body > kMaxBodyBytes)
    return Status::invalidArgument(strCat("control header: body of ", body, " bytes exceeds the ", kMaxBodyBytes, "-byte limit"));
  return Header{static_cast<MessageType>(type), body, request};
}

Result<Message> decode(const Header& header, std::span<const std::byte> body) {
  if (body.size() != header.body_bytes)
    return Status::dataLoss(strCat("control message '", messageTypeName(header.type), "': header announces ",
                                   header.body_bytes, " body bytes, got ", body.size()));
  BodyParser p(header.type, body);
  Message m{header.request_id, Hello{}};
  switch (header.type) {
    case MessageType::kHello: m.body = parseHello(p); break;
    case MessageType::kWelcome: m.body = parseWelcome(p); break;
    case MessageType::kDeclare: m.body = parseDeclare(p); break;
    case MessageType::kDeclared: m.body = parseDeclared(p); break;
    case MessageType::kSubmit: m.body = parseKeys<Submit>(p); break;
    case MessageType::kComplete: m.body = parseComplete(p); break;
    case MessageType::kError: m.body = parseError(p); break;
    case MessageType::kDeclareDevice: m.body = parseDeclareDevice(p); break;
    case MessageType::kDeclaredDevice: m.body = parseDeclaredDevice(p); break;
    case MessageType::kPing: m.body = Ping{}; break;
    case MessageType::kPong: m.body = Pong{}; break;
    case MessageType::kMembership: m.body = parseMembership(p); break;
    case MessageType::kStateGet: m.body = parseStateGet(p); break;
    case MessageType::kStatePart: m.body = parseStatePart(p); break;
    case MessageType::kStateStored: m.body = parseStateStored(p); break;
    case MessageType::kIterationQuery: m.body = parseIterationQuery(p); break;
    case MessageType::kIterationAnswer: m.body = parseIterationAnswer(p); break;
  }
  GC_RETURN_IF_ERROR(p.finish());
  return m;
}

}  // namespace gcagent::shm::protocol

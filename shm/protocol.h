// The control protocol between a trainer (through the client library) and its node's agent,
// carried over a Unix stream socket. Every message is a 16-byte little-endian header
//   u32 magic "GCAC" | u16 version | u16 type | u32 body bytes | u32 request id
// followed by the body. Gradients never travel here: they sit in shared-memory slots, and
// these messages only say which slots are ready. decode() validates every field.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/status.h"

namespace gcagent::shm::protocol {

inline constexpr uint32_t kMagic = 0x43414347;  // "GCAC" in memory order
inline constexpr uint16_t kVersion = 1;
inline constexpr size_t kHeaderBytes = 16;
inline constexpr size_t kMaxBodyBytes = 16u << 20;

// Field limits, checked on both encode (by the tests) and decode.
inline constexpr size_t kMaxJobName = 128;
inline constexpr size_t kMaxCodecName = 32;
inline constexpr size_t kMaxParamKey = 64;
inline constexpr size_t kMaxParamValue = 256;
inline constexpr size_t kMaxParams = 16;
inline constexpr size_t kMaxTensors = 1u << 16;
inline constexpr size_t kMaxLocalSize = 1024;
inline constexpr uint64_t kMaxElements = uint64_t{1} << 40;
inline constexpr size_t kMaxErrorMessage = 4096;
inline constexpr size_t kMaxSegmentName = 255;
inline constexpr uint32_t kMaxNodes = 65536;
inline constexpr uint64_t kMaxStatePartBytes = 4u << 20;
inline constexpr uint64_t kMaxStateBytes = uint64_t{1} << 40;

enum class MessageType : uint16_t {
  kHello = 1,     // trainer -> agent: join a job as one local rank
  kWelcome = 2,   // agent -> trainer: accepted
  kDeclare = 3,   // trainer -> agent: the tensors this trainer will reduce
  kDeclared = 4,  // agent -> trainer: the shared segment and each tensor's slot in it
  kSubmit = 5,    // trainer -> agent: these slots hold this iteration's gradients
  kComplete = 6,  // agent -> trainer: these slots now hold the averaged gradients
  kError = 7,     // either way: a request failed
  // Added in version 1 without breaking it: an agent that predates them answers the first
  // one with "unknown message type 8".
  kDeclareDevice = 8,   // trainer -> agent: tensors that live on the trainer's GPU
  kDeclaredDevice = 9,  // agent -> trainer: device slots in one exported allocation
  // Added in version 1 the same way: an agent that predates them answers a ping with an
  // error, which shows it alive just as well.
  kPing = 10,  // trainer -> agent: are you there? (sent while a wait hears nothing)
  kPong = 11,  // agent -> trainer: yes, with the ping's request id
  // Added in version 1 the same way; sent only by an agent whose job can change its nodes
  // (transport.on_peer_loss = shrink), unasked, with request id 0.
  kMembership = 12,  // agent -> trainer: the job's reductions now run on node_count nodes
  // Added in version 1 the same way: an agent that predates them answers "unknown message
  // type 13". A tensor's error-feedback state, for checkpoints (agent/engine/residual_state.h),
  // in parts of at most kMaxStatePartBytes.
  kStateGet = 13,     // trainer -> agent: the part of a tensor's state from `offset` on
  kStatePart = 14,    // either way: part of a tensor's state (the reply to a get, or a put)
  kStateStored = 15,  // agent -> trainer: a put part is in; at the last, the state is in force
  // Where a step goes (added in version 1 without changing it: older agents answer an error).
  kIterationQuery = 16,   // trainer -> agent: which iteration of the job would my iteration i be?
  kIterationAnswer = 17,  // agent -> trainer: that one (0: i was given up)
};
std::string_view messageTypeName(MessageType type);

// A tensor's element type in its slot. The agent reduces in fp32: bfloat16 and float16 slots
// (added in version 1: an older agent refuses them as an unknown dtype) are widened exactly
// into fp32 at a submit and the result rounded back to nearest even at its completion.
enum class DType : uint8_t { kFloat32 = 1, kBFloat16 = 2, kFloat16 = 3 };
size_t dtypeBytes(DType dtype);
std::string_view dtypeName(DType dtype);

inline constexpr size_t kGpuUuidBytes = 16;
inline constexpr size_t kIpcHandleBytes = 64;  // CUipcMemHandle and CUipcEventHandle
using GpuUuidBytes = std::array<uint8_t, kGpuUuidBytes>;
using IpcHandleBytes = std::array<uint8_t, kIpcHandleBytes>;
// Largest device allocation the agent offers one trainer.
inline constexpr uint64_t kMaxDeviceBytes = uint64_t{1} << 42;

// How the trainer maps the agent's device allocation.
enum class DeviceHandleKind : uint8_t {
  kPosixFd = 1,       // cuMem (VMM) allocation; its fd rides on the frame with SCM_RIGHTS
  kLegacyIpc = 2,     // cuIpcGetMemHandle handle in mem_handle (no VMM fd export)
};

struct Hello {
  std::string job;
  uint32_t local_rank = 0;
  uint32_t local_size = 1;
  uint32_t pid = 0;
  bool operator==(const Hello&) const = default;
};

struct Welcome {
  uint32_t trainer_id = 0;
  uint32_t node_rank = 0;
  uint32_t node_count = 0;
  // The agent's transport.reduction_timeout in ms, by which it fails a step it cannot
  // complete (0: none, or an older agent, which sends nothing). Shims wait at least that long
  // before they give a step up themselves: the agent may still complete it into their slots.
  uint32_t reduction_timeout_ms = 0;
  bool operator==(const Welcome&) const = default;
};

struct TensorDecl {
  uint64_t key = 0;
  uint64_t elements = 0;
  DType dtype = DType::kFloat32;
  int32_t priority = 0;  // higher goes first; shims send minus the layer index
  std::string codec;     // empty: the agent's default
  std::vector<std::pair<std::string, std::string>> params;
  bool operator==(const TensorDecl&) const = default;
};

struct Declare {
  std::vector<TensorDecl> tensors;
  bool operator==(const Declare&) const = default;
};

struct Declared {
  std::string segment;  // shared-memory object name
  uint64_t segment_bytes = 0;
  std::vector<uint64_t> slot_offsets;  // parallel to Declare::tensors
  bool operator==(const Declared&) const = default;
};

// Declare, for tensors that live on the trainer's GPU (`gpu`, its UUID): the agent answers
// with DeclaredDevice when it uses the same GPU, with an Error naming both GPUs otherwise.
struct DeclareDevice {
  GpuUuidBytes gpu{};
  std::vector<TensorDecl> tensors;
  bool operator==(const DeclareDevice&) const = default;
};

// One device allocation of `allocation_bytes` on the agent's GPU, with each tensor's slot
// in it, and two interprocess events: the trainer records `ready_event` after writing its
// gradients and before submitting (the agent's stream waits on it); the agent records
// `done_event` after writing the averages and before completing (the trainer's stream
// waits on it).
struct DeclaredDevice {
  DeviceHandleKind kind = DeviceHandleKind::kPosixFd;
  GpuUuidBytes gpu{};
  uint64_t allocation_bytes = 0;
  IpcHandleBytes mem_handle{};  // kLegacyIpc only; zero for kPosixFd
  IpcHandleBytes ready_event{};
  IpcHandleBytes done_event{};
  std::vector<uint64_t> slot_offsets;  // parallel to DeclareDevice::tensors
  bool operator==(const DeclaredDevice&) const = default;
};

struct Submit {
  uint64_t iteration = 0;
  std::vector<uint64_t> keys;
  bool operator==(const Submit&) const = default;
};

// reload_root, when present (a u32 after the keys; an older agent sends none): an iteration
// was given up on some node, which others may have completed, and this is the first that
// completed after it: the trainers load that node's weights before their next step
// (agent/engine/job_reload.h).
struct Complete {
  uint64_t iteration = 0;
  std::vector<uint64_t> keys;
  std::optional<uint32_t> reload_root;
  bool operator==(const Complete&) const = default;
};

struct Error {
  StatusCode code = StatusCode::kInternal;
  std::string message;
  bool operator==(const Error&) const = default;
};

struct Ping {
  bool operator==(const Ping&) const = default;
};

struct Pong {
  bool operator==(const Pong&) const = default;
};

// The nodes the job's reductions run on changed (agent/membership/membership.h): averages divide by the
// trainers of node_count nodes from the next completion on. Members and joined (added in
// version 1 at the end of the body; an older agent sends neither): the node ranks, and those
// whose trainers load the weights of the lowest other member after the first step they
// complete under this membership (agent/membership/membership_view.h).
struct Membership {
  uint32_t epoch = 0;
  uint32_t node_count = 0;
  std::vector<uint32_t> members;
  std::vector<uint32_t> joined;
  bool operator==(const Membership&) const = default;
};

// A tensor's error-feedback state is read part by part: the trainer asks from offset 0 (the
// agent takes a fresh copy of the state then) and on from each part's end until `total`.
struct StateGet {
  uint64_t key = 0;
  uint64_t offset = 0;
  bool operator==(const StateGet&) const = default;
};

// Bytes [offset, offset + bytes.size()) of a tensor's state of `total` bytes. Written in
// order from offset 0; the agent checks the state and puts it in force at the last part.
struct StatePart {
  uint64_t key = 0;
  uint64_t total = 0;
  uint64_t offset = 0;
  std::vector<std::byte> bytes;
  bool operator==(const StatePart&) const = default;
};

// `received` bytes of the tensor's state are in; once that is the total, the state is in
// force, less `dropped` parts that belonged to another layout of the job (the slices another
// node owns now: agent/engine/residual_state.h).
struct StateStored {
  uint64_t key = 0;
  uint64_t received = 0;
  uint32_t dropped = 0;
  bool operator==(const StateStored&) const = default;
};

// Trainers number their steps themselves; the job's nodes agree on the iterations they reduce,
// which differ after a realignment (agent/engine/job_alignment.h). A trainer that chooses what
// a step sends by the job's iteration (DiLoCo's fragment turns) asks before it submits.
struct IterationQuery {
  uint64_t iteration = 0;
  bool operator==(const IterationQuery&) const = default;
};

struct IterationAnswer {
  uint64_t iteration = 0;      // the trainer's, as asked
  uint64_t job_iteration = 0;  // the job's, 0 when the trainer's was given up
  bool operator==(const IterationAnswer&) const = default;
};

using Body = std::variant<Hello, Welcome, Declare, Declared, Submit, Complete, Error, DeclareDevice, DeclaredDevice,
                          Ping, Pong, Membership, StateGet, StatePart, StateStored, IterationQuery, IterationAnswer>;

struct Message {
  uint32_t request_id = 0;
  Body body;
  bool operator==(const Message&) const = default;
};

struct Header {
  MessageType type;
  uint32_t body_bytes;
  uint32_t request_id;
};

// Header and body in one buffer.
std::vector<std::byte> encode(const Message& message);

// Checks magic, version, type and the body length limit of exactly kHeaderBytes bytes.
Result<Header> parseHeader(std::span<const std::byte> bytes);

// Decodes and validates a body announced by `header`.
Result<Message> decode(const Header& header, std::span<const std::byte> body);

}  // namespace gcagent::shm::protocol

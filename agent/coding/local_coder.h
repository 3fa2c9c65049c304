// The node's half of a reduction, done where its local gradients live. The reduction engine
// sums a node's local gradients, encodes each slice of the sum with the node's residual, and
// decodes the owners' results into the trainers' buffers. For gradients on a GPU a LocalCoder
// does those three steps on that GPU, residuals included, so only encoded bytes cross PCIe;
// the owners' side (summing the contributions, encoding the result) stays with the engine.
//
// One LocalCoder per device; it keeps the residuals of every (job, key) it coded, per slice.
// Work is asynchronous: calls enqueue and return, `done` runs on the engine's thread. On the
// host the sum is formed in the first trainer's buffer and uncompressed slices leave from
// it without a copy; on a GPU only the encodings cross PCIe.
#pragma once

#include <cstdint>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "agent/coding/coder_device.h"
#include "common/default_init.h"
#include "common/status.h"
#include "compress/codec.h"
#include "scheduler/slicing.h"

namespace gcagent::agent {

// One key's reduction on this node, as the engine knows it.
struct KeyWork {
  uint64_t job = 0;
  uint64_t key = 0;
  uint64_t iteration = 0;
  compress::CodecSpec push;  // contributions
  compress::CodecSpec pull;  // results
  scheduler::SliceGeometry geometry;
  std::vector<float*> buffers;  // the local trainers' gradients, in the device's memory
  int32_t priority = 0;         // the tensor's: on the host, higher priorities are coded first
  // Owns the buffers' memory on the host (the trainers' segments): held until the work on
  // them has run, and pinning uncompressed slices that leave straight from the sum.
  std::shared_ptr<const void> keepalive;
  // The codecs' slice ids are {key, s, iteration}; with `renamed`, {id_key, id_slice + s,
  // iteration}: an owner codes one slice of a tensor under a key of its own (its residuals
  // kept apart from the node's), and seeded codecs must still see the tensor's ids.
  bool renamed = false;
  uint64_t id_key = 0;
  uint32_t id_slice = 0;
};

// One slice's bytes for the wire and what keeps them alive until the transport is done: an
// encoding, or for a slice that leaves uncompressed from host memory, that memory.
struct SliceEncoding {
  std::shared_ptr<const void> pin;
  std::span<const std::byte> bytes;
  double seconds = 0;  // the encoding's duration where the device times it (the host), else 0
  // Meant to be coded, but it held an inf or a NaN: its floats as they are, its residual as
  // it was (the receivers then sum it exactly, as DDP would).
  bool raw = false;
};

// A key's encodings, one per slice, and how long the local sum took (timed on the host).
struct KeyEncodings {
  std::vector<SliceEncoding> slices;
  double sum_seconds = 0;
};

class LocalCoder {
 public:
  using Done = std::function<void(const Status&)>;
  using Encoded = std::function<void(Result<KeyEncodings>)>;

  // `residual_budget_bytes`: what the residuals kept on the device may take (as the engine's
  // compress.residual_budget_bytes on the host); an encode that needs more fails naming it.
  explicit LocalCoder(std::unique_ptr<CoderDevice> device, size_t residual_budget_bytes = SIZE_MAX);
  ~LocalCoder();

  // Sums the buffers into buffers[0] and encodes every slice of the sum: with the push codec
  // and the slice's residual when `compressed`, else uncompressed with whatever residual the
  // slice still owes added in (and cleared). Slices marked in `exact` (those this node owns,
  // whose sum it adds itself, as the host path does) always go uncompressed, and so does a
  // slice holding an inf or a NaN, its residual untouched (SliceEncoding::raw). `done` gets
  // one encoding per slice.
  void encode(const KeyWork& work, bool compressed, const std::vector<bool>& exact, Encoded done);
  // Writes the decoding of an owner's result for `slice`, divided by `divisor` (1: the sum),
  // into every buffer; `compressed`: encoded with the pull codec, else uncompressed. An empty
  // `done` enqueues without a report (one after() per slice would stall the stream each
  // time): the next call with a `done` reports for every decode of the key since, with the
  // first failure.
  // `bytes_owner`, when set, keeps `bytes` valid while held: on the host they are decoded
  // where they are, else they are staged first (the caller's memory is gone after the call).
  void decodeResult(const KeyWork& work, uint32_t slice, bool compressed, std::span<const std::byte> bytes,
                    float divisor, Done done, std::shared_ptr<const void> bytes_owner = nullptr);
  // An owner's merge: adds the decoding of one node's contribution to `slice` into that
  // slice's sum, work.buffers[0] (`first`: writes it, the sum's first contribution), with the
  // push codec when `compressed`, else raw. `work` is the tensor's (its geometry, under a key
  // of the owner's that every slice's merges share; a merge keeps no residual), its buffer the
  // one slice's sum. The bytes are decoded
  // where they are on the host (`bytes_owner` held until then), else staged to the device
  // for this merge alone (sums of several iterations of one slice may merge at once).
  // `seconds`, where the device times it (the host), gets the decode's duration; `done`
  // reports once it has run, with the codec's error for bytes it cannot decode.
  void merge(const KeyWork& work, uint32_t slice, bool compressed, std::span<const std::byte> bytes, bool first,
             double* seconds, Done done, std::shared_ptr<const void> bytes_owner);
  // The reduction `work` ends before its coder reported (it failed). Its work not yet run is
  // dropped where the device can, and `done` runs once nothing of it will touch the buffers
  // again: only then may the trainers hear of the failure (they write their next step
  // there). The buffers' memory stays mapped until then.
  void abandon(const KeyWork& work, Done done);
  // A node on its own: every buffer gets the sum of the buffers divided by `divisor` (1: the sum).
  void sum(const KeyWork& work, float divisor, Done done);

  // Drops the residuals and scratch memory of a key (its size or codec changed) or a job.
  void forget(uint64_t job, uint64_t key);
  void forgetJob(uint64_t job);

  // Residual states by slice, copied out of the device (an empty entry: none yet).
  using SliceStates = std::vector<std::vector<float>>;
  using Exported = std::function<void(Result<std::vector<SliceStates>>)>;
  // Copies the residual states of `keys` of `job` to the host, each key's once the work
  // enqueued for it so far has run, for a checkpoint; a key never coded here has none.
  // `done` gets them in the order of `keys`.
  void exportStates(uint64_t job, const std::vector<uint64_t>& keys, Exported done);
  // Puts `states` (by slice, each empty or the codec's whole state of its slice) in place of
  // the residuals of `work`'s key, ahead of whatever is enqueued for the key after it. A
  // failed copy surfaces at the key's next report.
  Status importStates(const KeyWork& work, const SliceStates& states);

  // A slice's residual state, where the engine's thread can read it (host memory, between
  // the key's reductions); empty elsewhere or before its first compressed encode.
  std::span<const float> residualOf(uint64_t job, uint64_t key, uint32_t slice) const;

  CoderDevice& device() { return *device_; }

 private:
  struct KeyCoding;
  // The key's codecs, and with `buffers` its staging memory (a merge stages per call).
  Result<KeyCoding*> prepare(const KeyWork& work, bool buffers = true);
  void tag(const KeyWork& work);
  static compress::SliceId idOf(const KeyWork& work, uint32_t slice);
  // A slice's residual state on the device, allocated (zeroed) at its first compressed encode
  // and counted against the budget.
  Result<std::span<float>> stateOf(KeyCoding& k, uint64_t key, uint32_t slice, size_t elements);
  void release(KeyCoding& k);
  // encode()'s second half: the slices' encodes (`coded`) or raw copies, then the report.
  void encodeSlices(const KeyWork& work, KeyCoding& k, std::vector<bool> coded, Status st,
                    std::shared_ptr<std::vector<double>> seconds, Encoded done);
  // Keeps the first failure of a decode enqueued without a report, for the key's next report.
  void defer(const KeyWork& w, uint32_t slice, const Status& st);

  std::unique_ptr<CoderDevice> device_;
  size_t residual_budget_bytes_;
  size_t residual_bytes_ = 0;
  std::map<std::pair<uint64_t, uint64_t>, std::unique_ptr<KeyCoding>> keys_;
  std::map<std::pair<uint64_t, uint64_t>, Status> deferred_;
};

}  // namespace gcagent::agent

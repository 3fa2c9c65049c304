#include "agent/coding/local_coder.h"

#include "agent/coding/slice_math.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "common/str_cat.h"
#include "compress/registry.h"

namespace gcagent::agent {
namespace {

constexpr size_t kAlign = 256;  // encodings hold fp32 headers; GPU kernels want aligned starts

size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

std::byte* at(void* base, size_t offset) { return static_cast<std::byte*>(base) + offset; }

// The bytes an encoding took: its size when fixed, else the sparse layout's 4 + 8 * count.
Result<size_t> encodedSize(bool fixed, size_t returned, const std::byte* host, size_t capacity) {
  if (fixed) return returned;
  uint32_t count = 0;
  std::memcpy(&count, host, sizeof count);
  const size_t bytes = 4 + 8 * size_t{count};
  if (bytes > capacity)
    return Status::internal(strCat("an encoding claims ", count, " pairs, more than its ", capacity, " bytes hold"));
  return bytes;
}

}  // namespace

// What a LocalCoder keeps per (job, key): the codecs, the residuals (one state per slice, in
// the device's memory) and the scratch the encodings pass through on their way to the host.
struct LocalCoder::KeyCoding {
  compress::CodecSpec push_spec, pull_spec;
  scheduler::SliceGeometry geometry;
  std::unique_ptr<compress::Codec> push_layout;  // the CPU twin: sizes and where the residual sits
  std::unique_ptr<compress::Codec> pull_layout;
  std::unique_ptr<DeviceCodec> push, pull, raw;
  std::vector<float*> states;  // by slice; null until its first compressed encode
  int32_t priority = 0;        // of the key's work (a host stream runs a tag at one priority)
  // Per slice, on the host: room for either encoding (compressed or uncompressed). On the
  // device only compressed encodings need room: uncompressed slices leave from the sum.
  std::vector<size_t> encode_offsets, decode_offsets, device_encode_offsets;
  size_t encode_bytes = 0, decode_bytes = 0, device_encode_bytes = 0;
  void* encode_device = nullptr;  // null when the push codec is none
  void* encode_host = nullptr;
  void* decode_device = nullptr;
  void* decode_host = nullptr;
  // Per slice, set where the slice's sum held an inf or a NaN (CoderDevice::markNonFinite).
  // Like the staging buffers above, it serves one encode of the key at a time.
  uint32_t* non_finite = nullptr;
  std::optional<uint64_t> abandoned;  // the iteration abandon() gave up, until the next encode
};

LocalCoder::LocalCoder(std::unique_ptr<CoderDevice> device, size_t residual_budget_bytes)
    : device_(std::move(device)), residual_budget_bytes_(residual_budget_bytes) {}

LocalCoder::~LocalCoder() {
  for (auto& [id, k] : keys_) release(*k);
}

void LocalCoder::release(KeyCoding& k) {
  for (uint32_t s = 0; s < k.states.size(); ++s) {
    if (k.states[s] == nullptr) continue;
    device_->freeDevice(k.states[s]);
    residual_bytes_ -= k.push_layout->stateElements(k.geometry.size(s)) * sizeof(float);
  }
  k.states.clear();
  for (void* p : {k.encode_device, k.decode_device})
    if (p != nullptr) device_->freeDevice(p);
  for (void* p : {k.encode_host, k.decode_host, static_cast<void*>(k.non_finite)})
    if (p != nullptr) device_->freeHost(p);
  k.encode_device = k.decode_device = k.encode_host = k.decode_host = nullptr;
  k.non_finite = nullptr;
}

void LocalCoder::forget(uint64_t job, uint64_t key) {
  auto it = keys_.find({job, key});
  if (it == keys_.end()) return;
  release(*it->second);
  keys_.erase(it);
}

void LocalCoder::forgetJob(uint64_t job) {
  std::erase_if(deferred_, [job](const auto& d) { return d.first.first == job; });
  for (auto it = keys_.lower_bound({job, 0}); it != keys_.end() && it->first.first == job;) {
    release(*it->second);
    it = keys_.erase(it);
  }
}

Result<LocalCoder::KeyCoding*> LocalCoder::prepare(const KeyWork& w, bool buffers) {
  auto found = keys_.find({w.job, w.key});
  if (found != keys_.end()) {
    KeyCoding& old = *found->second;
    if (old.push_spec.name == w.push.name && old.push_spec.params == w.push.params &&
        old.pull_spec.name == w.pull.name && old.pull_spec.params == w.pull.params &&
        old.geometry.elements == w.geometry.elements && old.geometry.slice_elements == w.geometry.slice_elements) {
      old.priority = w.priority;
      return &old;
    }
    // Declared again with another size or codec: what was owed belongs to another tensor.
    forget(w.job, w.key);
  }
  auto k = std::make_unique<KeyCoding>();
  k->push_spec = w.push;
  k->pull_spec = w.pull;
  k->geometry = w.geometry;
  GC_ASSIGN_OR_RETURN(k->push_layout, compress::makeCodec(w.push));
  GC_ASSIGN_OR_RETURN(k->pull_layout, compress::makeCodec(w.pull));
  GC_ASSIGN_OR_RETURN(k->push, device_->makeCodec(w.push));
  GC_ASSIGN_OR_RETURN(k->pull, device_->makeCodec(w.pull));
  GC_ASSIGN_OR_RETURN(k->raw, device_->makeCodec({"none", {}}));
  const uint32_t slices = w.geometry.count();
  k->states.assign(slices, nullptr);
  for (uint32_t s = 0; s < slices; ++s) {
    const size_t n = w.geometry.size(s), raw = n * sizeof(float);
    k->encode_offsets.push_back(k->encode_bytes);
    k->encode_bytes += aligned(std::max(k->push_layout->maxEncodedBytes(n), raw));
    k->device_encode_offsets.push_back(k->device_encode_bytes);
    k->device_encode_bytes += aligned(k->push_layout->maxEncodedBytes(n));
    k->decode_offsets.push_back(k->decode_bytes);
    k->decode_bytes += aligned(std::max(k->pull_layout->maxEncodedBytes(n), raw));
  }
  // Kept in the map from here on, so forget() frees whatever was allocated if a step fails.
  KeyCoding& kc = *(keys_[{w.job, w.key}] = std::move(k));
  kc.priority = w.priority;
  GC_ASSIGN_OR_RETURN(void* flags, device_->allocateHost(slices * sizeof(uint32_t)));
  kc.non_finite = static_cast<uint32_t*>(flags);
  // On the host, encodings are written into buffers of their own and results are decoded
  // where the transport left them (decode_host is made only if a result must be staged).
  if (device_->hostAddressable() || !buffers) return &kc;
  GC_ASSIGN_OR_RETURN(kc.decode_host, device_->allocateHost(kc.decode_bytes));
  if (kc.push_spec.name != "none") {  // none is never compressed: every slice leaves from the sum
    GC_ASSIGN_OR_RETURN(kc.encode_device, device_->allocateDevice(kc.device_encode_bytes));
  }
  GC_ASSIGN_OR_RETURN(kc.encode_host, device_->allocateHost(kc.encode_bytes));
  GC_ASSIGN_OR_RETURN(kc.decode_device, device_->allocateDevice(kc.decode_bytes));
  return &kc;
}

std::span<const float> LocalCoder::residualOf(uint64_t job, uint64_t key, uint32_t slice) const {
  if (!device_->hostAddressable()) return {};
  auto it = keys_.find({job, key});
  if (it == keys_.end()) return {};
  const KeyCoding& k = *it->second;
  if (slice >= k.states.size() || k.states[slice] == nullptr) return {};
  return {k.states[slice], k.push_layout->stateElements(k.geometry.size(slice))};
}

Result<std::span<float>> LocalCoder::stateOf(KeyCoding& k, uint64_t key, uint32_t slice, size_t elements) {
  if (k.states[slice] != nullptr || elements == 0) return std::span<float>(k.states[slice], elements);
  const size_t bytes = elements * sizeof(float);
  if (bytes > residual_budget_bytes_ - residual_bytes_)
    return Status::resourceExhausted(strCat("residuals: tensor ", key, " slice ", slice, " needs ", bytes,
                                            " bytes, but ", residual_bytes_, " of the ", residual_budget_bytes_,
                                            "-byte budget are in use"));
  GC_ASSIGN_OR_RETURN(void* state, device_->allocateDevice(bytes));  // zeroed
  k.states[slice] = static_cast<float*>(state);
  residual_bytes_ += bytes;
  return std::span<float>(k.states[slice], elements);
}

compress::SliceId LocalCoder::idOf(const KeyWork& w, uint32_t slice) {
  return w.renamed ? compress::SliceId{w.id_key, w.id_slice + slice, w.iteration}
                   : compress::SliceId{w.key, slice, w.iteration};
}

void LocalCoder::tag(const KeyWork& w) {
  device_->setTag(w.job * 0x9e3779b97f4a7c15ull ^ w.key, w.priority);
}

void LocalCoder::exportStates(uint64_t job, const std::vector<uint64_t>& keys, Exported done) {
  // Each key's copies go out under its own tag, behind its earlier work; the last report
  // to come back hands every state over.
  struct Gather {
    std::vector<SliceStates> states;
    std::vector<std::vector<std::pair<void*, size_t>>> staged;  // per key, per slice: host copy, floats
    size_t left = 0;
    Status first;
    Exported done;
  };
  auto g = std::make_shared<Gather>();
  g->states.resize(keys.size());
  g->staged.resize(keys.size());
  g->left = keys.size() + 1;
  g->done = std::move(done);
  auto finish = [this, g](const Status& st) {
    if (!st.ok() && g->first.ok()) g->first = st;
    if (--g->left > 0) return;
    for (size_t i = 0; i < g->staged.size(); ++i) {
      g->states[i].resize(g->staged[i].size());
      for (size_t s = 0; s < g->staged[i].size(); ++s) {
        auto [host, floats] = g->staged[i][s];
        if (host == nullptr) continue;
        if (g->first.ok()) g->states[i][s].assign(static_cast<float*>(host), static_cast<float*>(host) + floats);
        device_->freeHost(host);
      }
    }
    if (!g->first.ok())
      return g->done(Status(g->first.code(), strCat("reading residuals on ", device_->describe(), ": ", g->first.message())));
    g->done(std::move(g->states));
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = keys_.find({job, keys[i]});
    if (it == keys_.end()) {
      finish({});
      continue;
    }
    KeyCoding& k = *it->second;
    device_->setTag(job * 0x9e3779b97f4a7c15ull ^ keys[i], k.priority);
    Status st;
    g->staged[i].assign(k.states.size(), {nullptr, 0});
    for (uint32_t s = 0; s < k.states.size() && st.ok(); ++s) {
      if (k.states[s] == nullptr) continue;
      const size_t floats = k.push_layout->stateElements(k.geometry.size(s));
      auto host = device_->allocateHost(floats * sizeof(float));
      if (!host.ok()) {
        st = host.status();
        break;
      }
      g->staged[i][s] = {*host, floats};
      st = device_->copy(*host, k.states[s], floats * sizeof(float));
    }
    device_->after([finish, st](const Status& ran) { finish(st.ok() ? ran : st); });
  }
  finish({});
}

Status LocalCoder::importStates(const KeyWork& w, const SliceStates& states) {
  tag(w);
  GC_ASSIGN_OR_RETURN(KeyCoding * prepared, prepare(w));
  KeyCoding& k = *prepared;
  k.priority = w.priority;
  if (states.size() != k.states.size())
    return Status::invalidArgument(strCat("tensor ", w.key, ": ", states.size(), " slices of state for ",
                                          k.states.size(), " slices"));
  for (uint32_t s = 0; s < states.size(); ++s) {
    const size_t floats = k.push_layout->stateElements(k.geometry.size(s));
    if (!states[s].empty() && states[s].size() != floats)
      return Status::invalidArgument(strCat("tensor ", w.key, " slice ", s, ": ", states[s].size(),
                                            " floats of state; codec ", k.push_spec.name, " keeps ", floats));
  }
  for (uint32_t s = 0; s < states.size(); ++s) {
    const size_t floats = k.push_layout->stateElements(k.geometry.size(s)), bytes = floats * sizeof(float);
    if (states[s].empty()) {
      if (k.states[s] != nullptr) GC_RETURN_IF_ERROR(device_->zero(k.states[s], bytes));
      continue;
    }
    GC_ASSIGN_OR_RETURN(std::span<float> state, stateOf(k, w.key, s, floats));
    GC_ASSIGN_OR_RETURN(void* host, device_->allocateHost(bytes));
    std::memcpy(host, states[s].data(), bytes);
    const Status copied = device_->copy(state.data(), host, bytes);
    device_->freeHost(host);  // once the copy has run
    GC_RETURN_IF_ERROR(copied);
  }
  return {};
}

void LocalCoder::encode(const KeyWork& w, bool compressed, const std::vector<bool>& exact, Encoded done) {
  deferred_.erase({w.job, w.key});  // a new iteration: what an abandoned one left is moot
  tag(w);
  auto prepared = prepare(w);
  if (!prepared.ok()) {
    forget(w.job, w.key);
    return device_->after([done = std::move(done), st = prepared.status()](const Status&) { done(st); });
  }
  KeyCoding& k = **prepared;
  k.abandoned.reset();
  const uint32_t slices = w.geometry.count();
  float* sum = w.buffers.at(0);
  Status st;
  // Times on the host: the encodes (one per slice), then the sum's adds.
  auto seconds = std::make_shared<std::vector<double>>(slices + w.buffers.size(), 0.0);
  for (size_t b = 1; b < w.buffers.size() && st.ok(); ++b)
    st = device_->add(sum, w.buffers[b], w.geometry.elements, &(*seconds)[slices + b]);
  // none's encoding is the floats themselves: it leaves from the sum like an exact slice.
  std::vector<bool> coded(slices, false);
  for (uint32_t s = 0; s < slices; ++s)
    coded[s] = compressed && k.push_spec.name != "none" && !(s < exact.size() && exact[s]);
  // A coded slice holding an inf or a NaN (an fp16 overflow step) goes as it is, its residual
  // untouched: the codecs would refuse it or keep it in the residual for good, and raw floats
  // carry it to every node as DDP's sum does.
  std::memset(k.non_finite, 0, slices * sizeof(uint32_t));
  // On the host each slice is checked just before its encode (still in cache), which skips
  // on the flag.
  if (device_->hostAddressable() || !st.ok())
    return encodeSlices(w, k, std::move(coded), st, std::move(seconds), std::move(done));
  // A GPU's launches cannot be skipped: the flags come back first.
  for (uint32_t s = 0; s < slices && st.ok(); ++s)
    if (coded[s]) st = device_->markNonFinite(sum + w.geometry.begin(s), w.geometry.size(s), &k.non_finite[s]);
  device_->after([this, w, &k, coded = std::move(coded), seconds, done = std::move(done)](const Status& ran) mutable {
    auto it = keys_.find({w.job, w.key});
    if (it == keys_.end() || it->second.get() != &k)
      return done(Status::failedPrecondition(strCat("tensor ", w.key, " was declared again while it was being encoded")));
    // Given up meanwhile: its trainers may already write the next step where the encodes read.
    if (k.abandoned == w.iteration) return done(Status::failedPrecondition(strCat("tensor ", w.key, ": the step was given up")));
    for (uint32_t s = 0; s < coded.size(); ++s) coded[s] = coded[s] && k.non_finite[s] == 0;
    tag(w);
    encodeSlices(w, k, std::move(coded), ran, std::move(seconds), std::move(done));
  });
}

void LocalCoder::encodeSlices(const KeyWork& w, KeyCoding& k, std::vector<bool> coded, Status st,
                              std::shared_ptr<std::vector<double>> seconds, Encoded done) {
  const bool on_host = device_->hostAddressable();
  float* sum = w.buffers.at(0);
  const uint32_t slices = w.geometry.count();
  std::vector<size_t> returned(slices, 0);
  std::vector<bool> fixed(slices, true);  // sparse encodings say their size once they have run
  // On the host: each coded slice's own encoding buffer, and its encode time.
  std::vector<std::shared_ptr<ByteBuffer>> own(slices);
  for (uint32_t s = 0; s < slices && st.ok(); ++s) {
    const size_t n = w.geometry.size(s);
    const std::span<float> values(sum + w.geometry.begin(s), n);
    const size_t state_n = k.push_layout->stateElements(n);
    Result<size_t> size = size_t{0};
    const std::byte* encoded = nullptr;
    if (coded[s]) {
      fixed[s] = k.push_layout->isFixedSize();
      auto state = stateOf(k, w.key, s, state_n);
      if (!state.ok()) {
        st = state.status();
        break;
      }
      std::span<std::byte> out;
      if (on_host) {
        own[s] = std::make_shared<ByteBuffer>(k.push_layout->maxEncodedBytes(n));
        out = *own[s];
      } else {
        out = {at(k.encode_device, k.device_encode_offsets[s]), k.push_layout->maxEncodedBytes(n)};
      }
      encoded = out.data();
      if (on_host) st = device_->markNonFinite(values.data(), n, &k.non_finite[s]);
      size = k.push->encode(values, *state, out, idOf(w, s), &(*seconds)[s], on_host ? &k.non_finite[s] : nullptr);
    } else {
      // Sent uncompressed after compressed rounds: the error still owed goes along, exactly
      // (not with a non-finite slice: its residual stays as it was).
      if (k.states[s] != nullptr && k.non_finite[s] == 0) {
        const std::span<const float> r = k.push_layout->residual({k.states[s], state_n}, n);
        if (!r.empty()) st = device_->flush(values.data(), k.states[s] + (r.data() - k.states[s]), n);
        if (st.ok()) st = device_->zero(k.states[s], state_n * sizeof(float));
      }
      // Uncompressed, the encoding is the floats themselves: on the host they leave from the
      // sum as they are; from a GPU they are copied out.
      encoded = reinterpret_cast<const std::byte*>(values.data());
      size = n * sizeof(float);
    }
    if (!size.ok()) st = size.status();
    if (st.ok()) returned[s] = *size;
    // Only the encoding crosses PCIe: its size, or the most a sparse one can take.
    if (st.ok() && !on_host) st = device_->copy(at(k.encode_host, k.encode_offsets[s]), encoded, *size);
  }
  device_->after([this, w, &k, st, on_host, coded = std::move(coded), fixed = std::move(fixed),
                  returned = std::move(returned), own = std::move(own), seconds,
                  done = std::move(done)](const Status& ran) {
    Status first = st.ok() ? ran : st;
    if (!first.ok()) return done(Status(first.code(), strCat("encoding on ", device_->describe(), ": ", first.message())));
    // The key may have been forgotten meanwhile (re-declared): its memory is gone.
    auto it = keys_.find({w.job, w.key});
    if (it == keys_.end() || it->second.get() != &k)
      return done(Status::failedPrecondition(strCat("tensor ", w.key, " was declared again while it was being encoded")));
    KeyEncodings encodings;
    for (size_t b = returned.size(); b < seconds->size(); ++b) encodings.sum_seconds += (*seconds)[b];
    for (uint32_t s = 0; s < returned.size(); ++s) {
      // Marked for coding, but found non-finite: sent as it is.
      const bool raw = k.non_finite[s] != 0;
      if (on_host && own[s] && !raw) {
        auto size = encodedSize(fixed[s], returned[s], own[s]->data(), own[s]->size());
        if (!size.ok()) return done(size.status());
        own[s]->resize(*size);
        encodings.slices.push_back({own[s], *own[s], (*seconds)[s]});
      } else if (on_host) {
        const float* values = w.buffers[0] + w.geometry.begin(s);
        const size_t bytes = w.geometry.size(s) * sizeof(float);
        encodings.slices.push_back({w.keepalive, {reinterpret_cast<const std::byte*>(values), bytes}, 0, raw});
      } else {
        const std::byte* bytes = at(k.encode_host, k.encode_offsets[s]);
        const size_t capacity =
            (s + 1 < returned.size() ? k.encode_offsets[s + 1] : k.encode_bytes) - k.encode_offsets[s];
        auto size = encodedSize(fixed[s] || !coded[s], returned[s], bytes, capacity);
        if (!size.ok()) return done(size.status());
        // Sized, then copied: a ByteBuffer built from a range copies byte by byte (default_init.h).
        auto payload = std::make_shared<ByteBuffer>(*size);
        std::memcpy(payload->data(), bytes, *size);
        encodings.slices.push_back({payload, *payload, 0, raw});
      }
    }
    done(std::move(encodings));
  });
}

void LocalCoder::decodeResult(const KeyWork& w, uint32_t slice, bool compressed, std::span<const std::byte> bytes,
                              float divisor, Done done, std::shared_ptr<const void> bytes_owner) {
  tag(w);
  auto prepared = prepare(w);
  if (!prepared.ok()) {
    forget(w.job, w.key);
    if (!done) return defer(w, slice, prepared.status());
    return device_->after([done = std::move(done), st = prepared.status()](const Status&) { done(st); });
  }
  KeyCoding& k = **prepared;
  const size_t b = w.geometry.begin(slice), n = w.geometry.size(slice);
  const size_t capacity = (slice + 1 < k.decode_offsets.size() ? k.decode_offsets[slice + 1] : k.decode_bytes) -
                          k.decode_offsets[slice];
  Status st;
  if (bytes.size() > capacity)
    st = Status::invalidArgument(strCat("a result of ", bytes.size(), " bytes for ", n, " elements"));
  // Where the decode reads: the bytes where the transport left them (host, owned), staged in
  // host memory (host), or staged and copied to the device.
  const std::byte* on_device = nullptr;
  const bool in_place = bytes_owner && device_->hostAddressable();
  if (in_place) on_device = bytes.data();
  if (st.ok() && !in_place && k.decode_host == nullptr) {  // a host coder stages only what it must
    Result<void*> made = device_->allocateHost(k.decode_bytes);
    if (made.ok()) k.decode_host = *made;
    if (!made.ok()) st = made.status();
  }
  if (st.ok() && !in_place) {
    std::byte* staged = at(k.decode_host, k.decode_offsets[slice]);
    std::memcpy(staged, bytes.data(), bytes.size());
    if (device_->hostAddressable()) {
      on_device = staged;
    } else {
      std::byte* device_stage = at(k.decode_device, k.decode_offsets[slice]);
      st = device_->copy(device_stage, staged, bytes.size());
      on_device = device_stage;
    }
  }
  float* out = w.buffers.at(0) + b;
  DeviceCodec& codec = compressed ? *k.pull : *k.raw;
  // A decode is scale * the decoding, bit for bit (the codec contract), and scaling by a
  // power-of-two divisor's reciprocal is the division's very bits: the average then costs no
  // pass of its own.
  const bool folded = exactReciprocal(divisor);
  if (st.ok()) st = codec.decode({on_device, bytes.size()}, {out, n}, folded ? 1.0f / divisor : 1.0f, idOf(w, slice));
  if (st.ok() && !folded) st = device_->divide(out, n, divisor);
  for (size_t t = 1; t < w.buffers.size() && st.ok(); ++t) st = device_->copy(w.buffers[t] + b, out, n * sizeof(float));
  if (in_place) device_->hold(std::move(bytes_owner));  // until the decode has run
  if (!done) return defer(w, slice, st);
  if (auto it = deferred_.find({w.job, w.key}); it != deferred_.end()) {
    st = std::move(it->second);
    deferred_.erase(it);
  }
  device_->after([this, st, pin = w.keepalive, done = std::move(done)](const Status& ran) {
    const Status first = st.ok() ? ran : st;
    if (!first.ok()) return done(Status(first.code(), strCat("decoding on ", device_->describe(), ": ", first.message())));
    done({});
  });
}

void LocalCoder::merge(const KeyWork& w, uint32_t slice, bool compressed, std::span<const std::byte> bytes,
                       bool first, double* seconds, Done done, std::shared_ptr<const void> bytes_owner) {
  tag(w);
  auto prepared = prepare(w, /*buffers=*/false);
  if (!prepared.ok()) {
    forget(w.job, w.key);
    return device_->after([done = std::move(done), st = prepared.status()](const Status&) { done(st); });
  }
  KeyCoding& k = **prepared;
  const size_t n = w.geometry.size(slice);
  Status st;
  std::span<const std::byte> in = bytes;
  Result<void*> host = static_cast<void*>(nullptr), staged = static_cast<void*>(nullptr);  // a device's staging, freed once the merge has run
  if (device_->hostAddressable() && !bytes_owner) {  // the caller's memory is gone after the call
    auto copy = std::make_shared<ByteBuffer>(bytes.begin(), bytes.end());
    in = *copy;
    bytes_owner = std::move(copy);
  } else if (!device_->hostAddressable()) {
    host = device_->allocateHost(bytes.size());
    if (host.ok()) staged = device_->allocateDevice(bytes.size());
    st = host.ok() ? staged.status() : host.status();
    if (st.ok()) {
      std::memcpy(*host, bytes.data(), bytes.size());
      st = device_->copy(*staged, *host, bytes.size());
      in = {static_cast<const std::byte*>(*staged), bytes.size()};
    }
  }
  DeviceCodec& codec = compressed ? *k.push : *k.raw;
  const std::span<float> sum(w.buffers.at(0), n);
  const compress::SliceId id = idOf(w, slice);
  if (st.ok()) st = first ? codec.decode(in, sum, 1.0f, id, seconds) : codec.decodeAdd(in, sum, id, seconds);
  if (host.ok() && *host != nullptr) device_->freeHost(*host);
  if (staged.ok() && *staged != nullptr) device_->freeDevice(*staged);
  device_->hold(std::move(bytes_owner));  // until the merge has run
  device_->after([st, pin = w.keepalive, done = std::move(done)](const Status& ran) { done(st.ok() ? ran : st); });
}

void LocalCoder::defer(const KeyWork& w, uint32_t slice, const Status& st) {
  if (st.ok()) return;
  deferred_.emplace(std::pair{w.job, w.key}, Status(st.code(), strCat("slice ", slice, ": ", st.message())));
}

void LocalCoder::abandon(const KeyWork& w, Done done) {
  deferred_.erase({w.job, w.key});
  if (auto it = keys_.find({w.job, w.key}); it != keys_.end()) it->second->abandoned = w.iteration;
  tag(w);
  device_->cancel([pin = w.keepalive, done = std::move(done)](const Status&) { done({}); });
}

void LocalCoder::sum(const KeyWork& w, float divisor, Done done) {
  tag(w);
  const size_t n = w.geometry.elements;
  float* sum = w.buffers.at(0);
  Status st;
  for (size_t b = 1; b < w.buffers.size() && st.ok(); ++b) st = device_->add(sum, w.buffers[b], n);
  if (st.ok() && divisor != 1.0f) st = device_->divide(sum, n, divisor);
  for (size_t b = 1; b < w.buffers.size() && st.ok(); ++b) st = device_->copy(w.buffers[b], sum, n * sizeof(float));
  device_->after([st, pin = w.keepalive, done = std::move(done)](const Status& ran) { done(st.ok() ? ran : st); });
}

}  // namespace gcagent::agent

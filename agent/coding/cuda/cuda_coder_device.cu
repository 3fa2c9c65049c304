#include "agent/coding/cuda/cuda_coder_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/str_cat.h"
#include "compress/cuda/gpu_codec.h"

namespace gcagent::agent {
namespace {

// ---- element kernels: one rounding per operation (no FMA contraction), as on the host.

constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 1 << 16;  // larger slices loop over the grid

unsigned blocksFor(size_t n) { return static_cast<unsigned>(std::min((n + kThreads - 1) / kThreads, kMaxBlocks)); }

__device__ __forceinline__ size_t firstIndex() { return blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ size_t gridStride() { return gridDim.x * static_cast<size_t>(blockDim.x); }

__global__ void addKernel(float* __restrict__ dst, const float* __restrict__ src, size_t n) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) dst[i] = __fadd_rn(dst[i], src[i]);
}

__global__ void scaleKernel(float* __restrict__ p, size_t n, float factor) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) p[i] = __fmul_rn(p[i], factor);
}

__global__ void fillKernel(float* __restrict__ p, size_t n, float value) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) p[i] = value;
}

__global__ void divideKernel(float* __restrict__ p, size_t n, float divisor) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) p[i] = __fdiv_rn(p[i], divisor);
}

__global__ void flushKernel(float* __restrict__ dst, float* __restrict__ residual, size_t n) {
  for (size_t i = firstIndex(); i < n; i += gridStride()) {
    dst[i] = __fadd_rn(dst[i], residual[i]);
    residual[i] = 0.0f;
  }
}

// *flag = 1 where an element is an infinity or a NaN; `flag` is pinned host memory, which
// the GPU writes through unified addressing.
__global__ void markNonFiniteKernel(const float* __restrict__ p, size_t n, uint32_t* flag) {
  bool found = false;
  for (size_t i = firstIndex(); i < n; i += gridStride()) found |= !isfinite(p[i]);
  if (found) *flag = 1;
}

// Keeps the first failure. The cast: nvcc warns of the [[nodiscard]] Status& an assignment returns.
void keepFirst(Status& first, Status s) {
  if (first.ok() && !s.ok()) static_cast<void>(first = std::move(s));
}

// ---- the queue: the stream, the first enqueue failure and the codecs used since the last after()

// A GPU codec as the device tracks it. Each after() covering its work enqueues a snapshot of
// its fault record (and clears the record), read when that after() reports: no report waits
// for the stream, and a fault stops only the work of the after() it belongs to.
struct CodecCell {
  std::unique_ptr<compress::cuda::GpuCodec> codec;
  bool touched = false;  // in the queue's list for the next after()
};

struct Queue {
  asio::io_context& io;
  int ordinal;
  cudaStream_t stream;
  std::string description;
  Status first;  // the first failed CUDA call since the last after()
  std::vector<std::shared_ptr<CodecCell>> touched;
  // Pinned slots the fault snapshots land in, reused; carved from chunks freed with the queue.
  std::vector<void*> free_snapshots;
  std::vector<void*> snapshot_chunks;

  ~Queue() {
    for (void* chunk : snapshot_chunks) cudaFreeHost(chunk);
  }

  Result<void*> snapshotSlot() {
    if (free_snapshots.empty()) {
      constexpr size_t kSlots = 256;
      void* chunk = nullptr;
      const cudaError_t err = cudaHostAlloc(&chunk, kSlots * compress::cuda::kFaultSnapshotBytes, cudaHostAllocDefault);
      if (err != cudaSuccess) return failure("cudaHostAlloc of fault snapshots", err);
      snapshot_chunks.push_back(chunk);
      for (size_t i = 0; i < kSlots; ++i)
        free_snapshots.push_back(static_cast<std::byte*>(chunk) + i * compress::cuda::kFaultSnapshotBytes);
    }
    void* slot = free_snapshots.back();
    free_snapshots.pop_back();
    return slot;
  }

  // Names the device and the call; clears the runtime's last error so the next launch check
  // does not report this failure again.
  Status failure(std::string_view call, cudaError_t err) const {
    cudaGetLastError();
    return Status::unavailable(strCat(description, ": ", call, " failed: ", cudaGetErrorString(err)));
  }
  Status check(cudaError_t err, std::string_view call) {
    if (err == cudaSuccess) return {};
    Status s = failure(call, err);
    keepFirst(first, s);
    return s;
  }
  Status use() { return check(cudaSetDevice(ordinal), "cudaSetDevice"); }
  Status launched(std::string_view kernel) { return check(cudaGetLastError(), strCat("launch of the ", kernel, " kernel")); }

  void touch(const std::shared_ptr<CodecCell>& cell) {
    if (cell->touched) return;
    cell->touched = true;
    touched.push_back(cell);
  }

  Status scale(float* p, size_t n, float factor) {
    if (n == 0) return {};
    scaleKernel<<<blocksFor(n), kThreads, 0, stream>>>(p, n, factor);
    return launched("scale");
  }
  // -0.0 everywhere: the identity of fp32 addition, so decodeAdd onto it keeps every bit.
  Status fillNegativeZero(float* p, size_t n) {
    if (n == 0) return {};
    fillKernel<<<blocksFor(n), kThreads, 0, stream>>>(p, n, -0.0f);
    return launched("fill");
  }
};

// One after(): what it covers, and whom to tell.
struct Pending {
  std::shared_ptr<Queue> queue;
  std::vector<std::shared_ptr<CodecCell>> codecs;
  std::vector<void*> snapshots;  // by codec; the stream fills them before the report runs
  Status first;
  CoderDevice::Done done;
  bool stream_passed = true;  // false: reported without the host function (its launch failed)
};

// On the engine's thread, once the stream has passed the after() point.
void report(std::unique_ptr<Pending> p) {
  Status first = std::move(p->first);
  for (size_t i = 0; i < p->snapshots.size(); ++i) {
    if (!p->stream_passed) break;  // the copies may still be queued: the slots are not reused
    keepFirst(first, p->codecs[i]->codec->faultIn(p->snapshots[i]));
    p->queue->free_snapshots.push_back(p->snapshots[i]);
  }
  p->done(first);
}

// A CUDA host function: no CUDA calls allowed, so it only hands the report to the engine.
void CUDART_CB postReport(void* raw) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(raw));
  asio::io_context& io = p->queue->io;
  asio::post(io, [p = std::move(p)]() mutable { report(std::move(p)); });
}

class CudaCodec : public DeviceCodec {
 public:
  CudaCodec(std::shared_ptr<Queue> queue, std::shared_ptr<CodecCell> cell)
      : queue_(std::move(queue)), cell_(std::move(cell)) {}

  Result<size_t> encode(std::span<const float> in, std::span<float> state, std::span<std::byte> out,
                        const compress::SliceId& id, double* /*seconds: not timed per slice*/,
                        const uint32_t* skip_if) override {
    // The stream cannot skip a launch on a flag the host reads: LocalCoder decides first.
    if (skip_if != nullptr) return Status::invalidArgument("a GPU encode cannot be skipped on a flag");
    GC_RETURN_IF_ERROR(queue_->use());
    queue_->touch(cell_);
    return cell_->codec->encode(in, state, out, id, queue_->stream);
  }

  // As compress::Codec::decode: -0.0 fill, decodeAdd, multiply.
  Status decode(std::span<const std::byte> in, std::span<float> out, float scale, const compress::SliceId& id,
                double* /*seconds: not timed per slice*/) override {
    GC_RETURN_IF_ERROR(queue_->use());
    queue_->touch(cell_);
    GC_RETURN_IF_ERROR(queue_->fillNegativeZero(out.data(), out.size()));
    GC_RETURN_IF_ERROR(cell_->codec->decodeAdd(in, out, id, queue_->stream));
    if (scale != 1.0f) return queue_->scale(out.data(), out.size(), scale);
    return {};
  }

  Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, const compress::SliceId& id,
                   double* /*seconds: not timed per slice*/) override {
    GC_RETURN_IF_ERROR(queue_->use());
    queue_->touch(cell_);
    return cell_->codec->decodeAdd(in, acc, id, queue_->stream);
  }

 private:
  std::shared_ptr<Queue> queue_;
  std::shared_ptr<CodecCell> cell_;
};

class CudaCoderDevice : public CoderDevice {
 public:
  explicit CudaCoderDevice(std::shared_ptr<Queue> queue) : q_(std::move(queue)) {}
  // Lets the host functions already queued run, so every pending report reaches the engine.
  ~CudaCoderDevice() override {
    if (cudaSetDevice(q_->ordinal) == cudaSuccess) cudaStreamSynchronize(q_->stream);
    cudaGetLastError();
  }

  std::string describe() const override { return q_->description; }

  Result<std::unique_ptr<DeviceCodec>> makeCodec(const compress::CodecSpec& spec) override {
    GC_RETURN_IF_ERROR(q_->use());  // the codec's own buffers live on this GPU
    GC_ASSIGN_OR_RETURN(auto codec, compress::cuda::makeGpuCodec(spec.name, spec.params));
    auto cell = std::make_shared<CodecCell>();
    cell->codec = std::move(codec);
    return std::unique_ptr<DeviceCodec>(std::make_unique<CudaCodec>(q_, std::move(cell)));
  }

  Result<void*> allocateDevice(size_t bytes) override {
    GC_RETURN_IF_ERROR(q_->use());
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (err != cudaSuccess)
      return Status::resourceExhausted(
          strCat(q_->description, ": cudaMalloc of ", bytes, " bytes failed: ", cudaGetErrorString(err)));
    // Zeroed for every stream, not just ours: allocation is rare, so wait for it here.
    cudaError_t zeroed = cudaMemsetAsync(p, 0, bytes, q_->stream);
    if (zeroed == cudaSuccess) zeroed = cudaStreamSynchronize(q_->stream);
    if (zeroed != cudaSuccess) {
      const Status s = q_->failure("zeroing new device memory", zeroed);
      cudaFree(p);
      return s;
    }
    return p;
  }

  Result<void*> allocateHost(size_t bytes) override {
    GC_RETURN_IF_ERROR(q_->use());
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return Status::resourceExhausted(
          strCat(q_->description, ": cudaHostAlloc of ", bytes, " bytes failed: ", cudaGetErrorString(err)));
    }
    std::memset(p, 0, bytes);  // as the host device's memory
    return p;
  }

  // Frees are rare (a key's size or codec changed): waiting for the stream is simplest.
  void freeDevice(void* p) override { release(p, cudaFree, "cudaFree"); }
  void freeHost(void* p) override { release(p, cudaFreeHost, "cudaFreeHost"); }

  Status add(float* dst, const float* src, size_t n, double* /*seconds: not timed*/) override {
    if (n == 0) return {};
    GC_RETURN_IF_ERROR(q_->use());
    addKernel<<<blocksFor(n), kThreads, 0, q_->stream>>>(dst, src, n);
    return q_->launched("add");
  }
  Status divide(float* p, size_t n, float divisor) override {
    if (n == 0) return {};
    GC_RETURN_IF_ERROR(q_->use());
    divideKernel<<<blocksFor(n), kThreads, 0, q_->stream>>>(p, n, divisor);
    return q_->launched("divide");
  }
  Status flush(float* dst, float* residual, size_t n) override {
    if (n == 0) return {};
    GC_RETURN_IF_ERROR(q_->use());
    flushKernel<<<blocksFor(n), kThreads, 0, q_->stream>>>(dst, residual, n);
    return q_->launched("flush");
  }
  Status markNonFinite(const float* p, size_t n, uint32_t* flag) override {
    if (n == 0) return {};
    GC_RETURN_IF_ERROR(q_->use());
    markNonFiniteKernel<<<blocksFor(n), kThreads, 0, q_->stream>>>(p, n, flag);
    return q_->launched("markNonFinite");
  }
  Status zero(void* p, size_t bytes) override {
    if (bytes == 0) return {};
    GC_RETURN_IF_ERROR(q_->use());
    return q_->check(cudaMemsetAsync(p, 0, bytes, q_->stream), "cudaMemsetAsync");
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return {};
    GC_RETURN_IF_ERROR(q_->use());
    return q_->check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, q_->stream), "cudaMemcpyAsync");
  }

  void after(Done done) override {
    const Status used = q_->use();  // a failure lands in q_->first, reported below
    auto p = std::unique_ptr<Pending>(
        new Pending{q_, std::exchange(q_->touched, {}), {}, std::exchange(q_->first, Status{}), std::move(done)});
    for (const std::shared_ptr<CodecCell>& cell : p->codecs) cell->touched = false;
    for (size_t i = 0; i < p->codecs.size() && used.ok(); ++i) {
      auto slot = q_->snapshotSlot();
      if (!slot.ok()) {
        keepFirst(p->first, slot.status());
        break;
      }
      p->snapshots.push_back(*slot);
      keepFirst(p->first, p->codecs[i]->codec->snapshotFaults(*slot, q_->stream));
    }
    if (used.ok()) {
      const cudaError_t err = cudaLaunchHostFunc(q_->stream, postReport, p.get());
      if (err == cudaSuccess) {
        p.release();  // postReport owns it now
        return;
      }
      keepFirst(p->first, q_->failure("cudaLaunchHostFunc", err));
    }
    p->stream_passed = false;
    asio::post(q_->io, [p = std::move(p)]() mutable { report(std::move(p)); });
  }

 private:
  void release(void* p, cudaError_t (*free_fn)(void*), std::string_view call) {
    if (p == nullptr) return;
    cudaError_t err = cudaSetDevice(q_->ordinal);
    if (err == cudaSuccess) err = cudaStreamSynchronize(q_->stream);
    if (err == cudaSuccess) err = free_fn(p);
    if (err != cudaSuccess) GC_LOG(kWarn, "agent", q_->failure(call, err).message());
  }

  std::shared_ptr<Queue> q_;
};

}  // namespace

Result<std::unique_ptr<CoderDevice>> makeCudaCoderDevice(asio::io_context& io, int ordinal, CUstream_st* stream,
                                                         std::string description) {
  if (Status s = compress::cuda::gpuAvailable(); !s.ok()) return Status(s.code(), strCat(description, ": ", s.message()));
  auto queue = std::make_shared<Queue>(Queue{io, ordinal, stream, std::move(description), {}, {}});
  GC_RETURN_IF_ERROR(queue->use());
  return std::unique_ptr<CoderDevice>(std::make_unique<CudaCoderDevice>(std::move(queue)));
}

}  // namespace gcagent::agent

// GPU codec throughput against device memory bandwidth measured in the same run: for each
// codec and size, encode (with its residual) and decode-add of n fp32 elements, timed with
// CUDA events over repeated calls, and a device-to-device cudaMemcpy of the same 4n bytes.
// GB/s counts the 4n gradient bytes per call for all three, so "x copy" is the codec's rate
// over the copy's. (The copy moves 8n bytes through memory; an encode with a residual moves at
// least 12n, so ~0.67x copy is at the memory bound for those.)
//
//   gcagent_gpu_codecs_bench [--min-elements N] [--max-elements N] [--codec NAME]...
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compress/cuda/device_buffer.h"
#include "compress/cuda/gpu_codec.h"
#include "compress/random_math.h"

namespace gcagent::compress::cuda {
namespace {

// Gradient-like values: a sum of uniforms (roughly normal), from the codecs' own generator.
__global__ void fillGradient(float* g, size_t n, uint64_t seed) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float s = 0.0f;
  for (int j = 0; j < 4; ++j) s += rng::uniform01(seed, 4 * i + j);
  g[i] = (s - 2.0f) * 1e-3f;
}

#define CHECK_CUDA(expr)                                                                   \
  do {                                                                                     \
    cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(e_));              \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

void mustOk(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.toString().c_str());
    std::exit(1);
  }
}

// Seconds per call of `body`, over enough calls to take about 50 ms (at least 3).
template <class F>
double secondsPerCall(cudaStream_t stream, F body) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  body();  // warm-up: first-use allocations, caches
  CHECK_CUDA(cudaStreamSynchronize(stream));
  int reps = 3;
  float ms = 0.0f;
  for (;;) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    for (int r = 0; r < reps; ++r) body();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    if (ms >= 50.0f || reps >= 1 << 14) break;
    reps = std::max(reps * 2, static_cast<int>(reps * 60.0f / std::max(ms, 0.01f)));
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return ms / 1e3 / reps;
}

int run(int argc, char** argv) {
  size_t min_elements = size_t{1} << 20;
  size_t max_elements = size_t{256} << 20;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--max-elements") && i + 1 < argc) max_elements = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--min-elements") && i + 1 < argc) min_elements = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--codec") && i + 1 < argc) only.emplace_back(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--min-elements N] [--max-elements N] [--codec NAME]...\n", argv[0]);
      return 2;
    }
  }
  if (Status s = gpuAvailable(); !s.ok()) {
    std::printf("skipped: %s\n", s.message().c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\n", prop.name);
  std::printf("%-9s %11s %12s %12s %12s %9s %9s %7s\n", "codec", "elements", "copy GB/s",
              "encode GB/s", "decode GB/s", "enc/copy", "dec/copy", "ratio");
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<size_t> sizes;
  for (size_t n = min_elements; n <= max_elements; n *= 4) sizes.push_back(n);
  for (size_t n : sizes) {
    auto g = DeviceBuffer<float>::allocate(n);
    auto acc = DeviceBuffer<float>::allocate(n);
    auto copy = DeviceBuffer<float>::allocate(n);
    mustOk(g.status(), "gradient");
    mustOk(acc.status(), "accumulator");
    mustOk(copy.status(), "copy target");
    fillGradient<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(g->data(), n, 1);
    const double copy_s = secondsPerCall(stream, [&] {
      CHECK_CUDA(cudaMemcpyAsync(copy->data(), g->data(), 4 * n, cudaMemcpyDeviceToDevice, stream));
    });
    const double copy_gbs = 4.0 * n / copy_s / 1e9;
    for (std::string_view name : gpuCodecNames()) {
      if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
      auto codec_or = makeGpuCodec(name);
      mustOk(codec_or.status(), "codec");
      GpuCodec& codec = **codec_or;
      auto state = DeviceBuffer<float>::allocate(std::max<size_t>(codec.stateElements(n), 1));
      auto out = DeviceBuffer<std::byte>::allocate(codec.maxEncodedBytes(n));
      mustOk(state.status(), "state");
      mustOk(out.status(), "output");
      const auto st = state->span().first(codec.stateElements(n));
      size_t bytes = 0;
      uint64_t step = 0;
      const double enc_s = secondsPerCall(stream, [&] {
        auto r = codec.encode(g->span(), st, out->span(), SliceId{1, 0, step++}, stream);
        mustOk(r.status(), "encode");
        bytes = *r;
      });
      mustOk(codec.finish(stream), "encode on the device");
      if (!codec.isFixedSize()) {  // the sparse codecs' pair count heads the encoding
        uint32_t count = 0;
        CHECK_CUDA(cudaMemcpy(&count, out->data(), 4, cudaMemcpyDeviceToHost));
        bytes = 4 + 8 * static_cast<size_t>(count);
      }
      const double dec_s = secondsPerCall(stream, [&] {
        mustOk(codec.decodeAdd(out->span().first(bytes), acc->span(), SliceId{1, 0, 0}, stream), "decode");
      });
      mustOk(codec.finish(stream), "decode on the device");
      const double enc_gbs = 4.0 * n / enc_s / 1e9, dec_gbs = 4.0 * n / dec_s / 1e9;
      std::printf("%-9.*s %11zu %12.1f %12.1f %12.1f %9.2f %9.2f %7.1f\n", static_cast<int>(name.size()),
                  name.data(), n, copy_gbs, enc_gbs, dec_gbs, enc_gbs / copy_gbs, dec_gbs / copy_gbs,
                  4.0 * n / static_cast<double>(bytes));
      std::fflush(stdout);
    }
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace
}  // namespace gcagent::compress::cuda

int main(int argc, char** argv) { return gcagent::compress::cuda::run(argc, argv); }

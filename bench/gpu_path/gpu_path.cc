// The agent's two data paths for a trainer's GPU gradients, timed on one GPU over a model's
// gradient set (bench/models/*.csv), per codec:
//
//   coded:  the GPU's LocalCoder encodes every slice on the GPU (residuals in GPU memory),
//           copies the encodings to the host, and decodes a result of the same size back
//           into the gradient, as the engine drives it;
//   staged: the whole gradient is copied to pinned host memory, the host LocalCoder (the CPU
//           codecs) encodes and decodes there, and the average is copied back.
//
// Both run in this process on the same gradients; "staged / coded" is the speedup of coding
// on the GPU, and the MB columns are what crossed PCIe per iteration. The result each slice
// decodes is its own encoding, standing in for the owner's (same codec, same size). The
// network is left out: it is the same for both.
//
//   gcagent_gpu_path_bench [--model bench/models/vgg16.csv] [--iterations N] [--codec NAME]...
//                          [--slice-elements N] [--encode-only]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "agent/coding/cuda/cuda_coder_device.h"
#include "agent/coding/host_coder_device.h"
#include "agent/coding/local_coder.h"
#include "compress/cuda/gpu_codec.h"

namespace gcagent::agent {
namespace {

using Clock = std::chrono::steady_clock;
uint64_t slice_elements = 40000;  // the agent's default scheduler.slice_elements; --slice-elements

void must(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "%s\n", what.c_str());
    std::exit(1);
  }
}

std::vector<uint64_t> readModel(const std::string& path) {
  std::ifstream in(path);
  must(in.good(), "cannot read " + path);
  std::vector<uint64_t> sizes;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("name,", 0) == 0) continue;
    sizes.push_back(std::stoull(line.substr(line.rfind(',') + 1)));
  }
  must(!sizes.empty(), path + " lists no tensors");
  return sizes;
}

bool encode_only = false;  // --encode-only: time the encodings alone, no result decodes

struct Run {
  double seconds = 0;   // per iteration
  double to_host = 0;   // bytes per iteration
  double to_device = 0;
};

// One iteration of every tensor through `coder` on `buffers[t]`: encode, then decode each
// slice's own encoding as its result. Returns when every report is in.
Run iterate(asio::io_context& io, LocalCoder& coder, const std::vector<uint64_t>& sizes,
            const std::vector<float*>& buffers, const compress::CodecSpec& codec, uint64_t iteration) {
  Run run;
  size_t outstanding = 0;
  const bool compressed = codec.name != "none";
  std::vector<KeyWork> works(sizes.size());
  for (size_t t = 0; t < sizes.size(); ++t) {
    KeyWork& w = works[t];
    w = {1, t, iteration, codec, codec, {sizes[t], slice_elements}, {buffers[t]}, 0, nullptr, false, 0, 0};
    ++outstanding;
    coder.encode(w, compressed, {}, [&, t](Result<KeyEncodings> r) {
      --outstanding;
      must(r.ok(), "encode: " + r.status().toString());
      const std::vector<SliceEncoding>& slices = r->slices;
      for (uint32_t s = 0; s < slices.size(); ++s) {
        const std::span<const std::byte> bytes = slices[s].bytes;
        run.to_host += static_cast<double>(bytes.size());
        if (encode_only) continue;
        run.to_device += static_cast<double>(bytes.size());
        if (s + 1 < slices.size()) {  // as the engine does: the last decode reports for all
          coder.decodeResult(works[t], s, compressed, bytes, 2.0f, {});
          continue;
        }
        ++outstanding;
        coder.decodeResult(works[t], s, compressed, bytes, 2.0f, [&](const Status& st) {
          --outstanding;
          must(st.ok(), "decode: " + st.toString());
        });
      }
    });
  }
  while (outstanding > 0) {
    io.restart();
    io.run_one();
  }
  return run;
}

int main(int argc, char** argv) {
  std::string model = "bench/models/vgg16.csv";
  int iterations = 5;
  std::vector<std::string> codecs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--model" && i + 1 < argc) model = argv[++i];
    else if (arg == "--iterations" && i + 1 < argc) iterations = std::atoi(argv[++i]);
    else if (arg == "--codec" && i + 1 < argc) codecs.push_back(argv[++i]);
    else if (arg == "--slice-elements" && i + 1 < argc) slice_elements = std::strtoull(argv[++i], nullptr, 10);
    else if (arg == "--encode-only") encode_only = true;
    else must(false, "usage: gcagent_gpu_path_bench [--model CSV] [--iterations N] [--codec NAME]... "
                     "[--slice-elements N] [--encode-only]");
  }
  if (codecs.empty()) codecs = {"none", "fp16", "2bit", "onebit", "dgc", "topk"};
  if (Status s = compress::cuda::gpuAvailable(); !s.ok()) {
    std::printf("skipped: %s\n", s.message().c_str());
    return 0;
  }
  const std::vector<uint64_t> sizes = readModel(model);
  uint64_t total = 0;
  std::vector<uint64_t> offsets;
  for (uint64_t n : sizes) {
    offsets.push_back(total);
    total += (n + 63) / 64 * 64;  // 256-byte aligned tensors, as the agent's slots
  }
  std::vector<float> gradient(total);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (float& v : gradient) v = normal(gen);

  cudaStream_t stream = nullptr;
  must(cudaSetDevice(0) == cudaSuccess && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess,
       "cannot create a stream on gpu 0");
  float* device = nullptr;
  float* pinned = nullptr;
  must(cudaMalloc(&device, total * sizeof(float)) == cudaSuccess, "cudaMalloc of the gradient");
  must(cudaHostAlloc(&pinned, total * sizeof(float), cudaHostAllocDefault) == cudaSuccess, "cudaHostAlloc");
  std::vector<float*> on_device, on_host;
  for (uint64_t off : offsets) {
    on_device.push_back(device + off);
    on_host.push_back(pinned + off);
  }

  asio::io_context io;
  auto cuda_device = makeCudaCoderDevice(io, 0, stream, "gpu 0");
  must(cuda_device.ok(), cuda_device.status().toString());
  LocalCoder gpu(std::move(cuda_device).value());
  LocalCoder host(makeHostCoderDevice(io));

  std::printf("model %s: %zu tensors, %.1f M elements, %d iterations after one warm-up, %llu-element slices%s\n",
              model.c_str(), sizes.size(), static_cast<double>(total) / 1e6, iterations,
              static_cast<unsigned long long>(slice_elements), encode_only ? ", encodings only" : "");
  std::printf("| codec | coded ms | staged ms | staged / coded | coded PCIe MB | staged PCIe MB |\n");
  std::printf("|---|---|---|---|---|---|\n");
  const double gradient_bytes = static_cast<double>(total) * sizeof(float);
  for (const std::string& name : codecs) {
    const compress::CodecSpec codec{name, {}};
    Run coded{}, staged{};
    for (int it = 0; it <= iterations; ++it) {
      must(cudaMemcpy(device, gradient.data(), gradient_bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
      const auto start = Clock::now();
      Run r = iterate(io, gpu, sizes, on_device, codec, it + 1);
      must(cudaStreamSynchronize(stream) == cudaSuccess, "gpu stream");
      r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (it > 0) coded.seconds += r.seconds / iterations, coded.to_host = r.to_host, coded.to_device = r.to_device;
    }
    for (int it = 0; it <= iterations; ++it) {
      must(cudaMemcpy(device, gradient.data(), gradient_bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
      const auto start = Clock::now();
      must(cudaMemcpyAsync(pinned, device, gradient_bytes, cudaMemcpyDeviceToHost, stream) == cudaSuccess &&
               cudaStreamSynchronize(stream) == cudaSuccess,
           "copy to the host");
      iterate(io, host, sizes, on_host, codec, it + 1);
      must(cudaMemcpyAsync(device, pinned, gradient_bytes, cudaMemcpyHostToDevice, stream) == cudaSuccess &&
               cudaStreamSynchronize(stream) == cudaSuccess,
           "copy to the gpu");
      if (it > 0) staged.seconds += std::chrono::duration<double>(Clock::now() - start).count() / iterations;
    }
    std::printf("| %s | %.2f | %.2f | %.2f | %.1f | %.1f |\n", name.c_str(), coded.seconds * 1e3, staged.seconds * 1e3,
                staged.seconds / coded.seconds, (coded.to_host + coded.to_device) / 1e6, 2 * gradient_bytes / 1e6);
  }
  cudaFreeHost(pinned);
  cudaFree(device);
  return 0;
}

}  // namespace
}  // namespace gcagent::agent

int main(int argc, char** argv) { return gcagent::agent::main(argc, argv); }

// Every codec, from one explicit list in registry.cc: one row per codec with its CPU factory
// and, in builds with CUDA, its GPU factory (compress/cuda/codecs.h).
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "compress/codec.h"

namespace gcagent::compress {

namespace cuda {
class GpuCodec;
}  // namespace cuda

using CodecFactory = Result<std::unique_ptr<Codec>> (*)(const Params&, const CodecEnv&);
// Takes parameters the CPU factory of the same row has already accepted.
using GpuCodecFactory = Result<std::unique_ptr<cuda::GpuCodec>> (*)(const Params&);

struct CodecInfo {
  std::string_view name;
  std::string_view summary;
  CodecFactory make;
  GpuCodecFactory make_gpu;  // null: no GPU kernels (or a build without CUDA)
};

std::span<const CodecInfo> codecList();

// Builds a codec by name; an unknown name or a bad parameter is an error naming it.
Result<std::unique_ptr<Codec>> makeCodec(std::string_view name, const Params& params = {},
                                         const CodecEnv& env = {});
inline Result<std::unique_ptr<Codec>> makeCodec(const CodecSpec& spec, const CodecEnv& env = {}) {
  return makeCodec(spec.name, spec.params, env);
}

}  // namespace gcagent::compress

// One codec's round trip over tensors read from a file, for the error measurements of
// bench/lowbit_error.py: each tensor is encoded (no residual kept: the error of one step) and
// decoded, and the decoded values written out.
//
//   gcagent_codec_roundtrip CODEC [KEY=VALUE ...] < tensors > decoded
//
// Input: per tensor, a little-endian u64 element count then that many fp32 values; output:
// the decoded fp32 values of every tensor, in order. Tensor t is slice (key t, slice 0,
// step 0).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "compress/registry.h"

int main(int argc, char** argv) {
  using namespace gcagent::compress;
  if (argc < 2) {
    std::fprintf(stderr, "usage: gcagent_codec_roundtrip CODEC [KEY=VALUE ...] < tensors > decoded\n");
    return 2;
  }
  Params params;
  for (int a = 2; a < argc; ++a) {
    const std::string kv = argv[a];
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "parameter '%s' is not KEY=VALUE\n", argv[a]);
      return 2;
    }
    params[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  params["error_feedback"] = "false";
  auto codec = makeCodec(argv[1], params);
  if (!codec.ok()) {
    std::fprintf(stderr, "%s\n", codec.status().toString().c_str());
    return 2;
  }
  uint64_t n = 0;
  for (uint64_t key = 0; std::fread(&n, sizeof n, 1, stdin) == 1; ++key) {
    std::vector<float> g(n), out(n, 0.0f);
    if (std::fread(g.data(), sizeof(float), n, stdin) != n) {
      std::fprintf(stderr, "tensor %llu: fewer than %llu values\n", static_cast<unsigned long long>(key),
                   static_cast<unsigned long long>(n));
      return 1;
    }
    std::vector<std::byte> bytes((*codec)->maxEncodedBytes(n));
    const SliceId id{key, 0, 0};
    auto written = (*codec)->encode(g, {}, bytes, id);
    if (!written.ok()) {
      std::fprintf(stderr, "tensor %llu: %s\n", static_cast<unsigned long long>(key),
                   written.status().toString().c_str());
      return 1;
    }
    bytes.resize(*written);
    const auto s = (*codec)->decodeAdd(bytes, out, id);
    if (!s.ok()) {
      std::fprintf(stderr, "tensor %llu: %s\n", static_cast<unsigned long long>(key), s.toString().c_str());
      return 1;
    }
    std::fwrite(out.data(), sizeof(float), n, stdout);
  }
  return 0;
}

// libFuzzer target: every registered codec's decodeAdd on hostile bytes. The first byte
// picks the codec, the next two the slice length, the rest is the encoded slice. A decode
// may fail, but must never read or write out of bounds nor hit undefined behaviour.
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "compress/registry.h"

using namespace gcagent::compress;

namespace {
std::vector<std::unique_ptr<Codec>>& codecs() {
  static auto* all = [] {
    auto* v = new std::vector<std::unique_ptr<Codec>>;
    for (const CodecInfo& info : codecList()) {
      auto codec = makeCodec(info.name);
      if (codec.ok()) v->push_back(std::move(codec).value());
    }
    return v;
  }();
  return *all;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3 || codecs().empty()) return 0;
  const Codec& codec = *codecs()[data[0] % codecs().size()];
  const size_t n = (static_cast<size_t>(data[1]) | static_cast<size_t>(data[2]) << 8) % 4097;
  std::vector<float> acc(n, 0.0f);
  const auto in = std::as_bytes(std::span(data + 3, size - 3));
  // An exact-size heap copy, so ASan sees any read past the encoded bytes.
  std::unique_ptr<std::byte[]> copy(new std::byte[in.size() + 1]);
  if (!in.empty()) std::memcpy(copy.get(), in.data(), in.size());
  (void)codec.decodeAdd({copy.get(), in.size()}, acc, SliceId{7, 1, 3});
  return 0;
}

// Every codec, from one explicit list in registry.cc.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "compress/codec.h"

namespace gcagent::compress {

using CodecFactory = Result<std::unique_ptr<Codec>> (*)(const Params&, const CodecEnv&);

struct CodecInfo {
  std::string_view name;
  std::string_view summary;
  CodecFactory make;
};

std::span<const CodecInfo> codecList();

// Builds a codec by name; an unknown name or a bad parameter is an error naming it.
Result<std::unique_ptr<Codec>> makeCodec(std::string_view name, const Params& params = {},
                                         const CodecEnv& env = {});
inline Result<std::unique_ptr<Codec>> makeCodec(const CodecSpec& spec, const CodecEnv& env = {}) {
  return makeCodec(spec.name, spec.params, env);
}

}  // namespace gcagent::compress

// libFuzzer target: TOML text through the configuration loader; errors are fine, crashes
// and sanitizer reports are not.
#include <cstdint>
#include <string>

#include "agent/config/config.h"

using namespace gcagent::agent;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ConfigInputs inputs;
  inputs.file_path = "fuzz.toml";
  inputs.file_text = std::string(reinterpret_cast<const char*>(data), size);
  auto loaded = loadConfig(inputs);
  if (loaded.ok()) (void)printConfig(*loaded);
  return 0;
}

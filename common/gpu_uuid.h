// A GPU's 16-byte UUID as nvidia-smi -L prints it: "GPU-1a2b3c4d-...". One spelling for the
// agent's messages and the CUDA IPC layer's.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>

namespace gcagent {

inline std::string gpuUuidText(const std::array<uint8_t, 16>& uuid) {
  char text[64];
  const auto* u = uuid.data();
  std::snprintf(text, sizeof text, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return text;
}

}  // namespace gcagent

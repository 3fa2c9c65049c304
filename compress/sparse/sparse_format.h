// The (index, value) encoding shared by topk, dgc and threshold:
//   u32 count | u32 index[count] | f32 value[count]       (little-endian)
// Indices are unique and below the slice length; decoders check both before adding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/status.h"

namespace gcagent::compress::sparse {

inline constexpr size_t bytesFor(size_t count) { return 4 + 8 * count; }

// Writes count pairs taken from (indices[i], values[i]); out must hold bytesFor(count).
size_t write(std::span<const uint32_t> indices, std::span<const float> values,
             std::span<std::byte> out);

// Checks the layout against a slice of n elements; `codec` names the caller in errors.
// Returns the pair count.
Result<size_t> validate(std::span<const std::byte> in, size_t n, std::string_view codec);

// acc[index[i]] += value[i]; `in` must have passed validate().
void addInto(std::span<const std::byte> in, std::span<float> acc);

// validate() then addInto().
Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, std::string_view codec);

// validate(), then out = -0.0 with (-0 + value[i]) * scale at index[i]: what decodeAdd adds
// to -0.0 (Codec::decode's contract), scaled, without a pass over the unsent elements
// beyond the fill.
Status decode(std::span<const std::byte> in, std::span<float> out, float scale, std::string_view codec);

}  // namespace gcagent::compress::sparse

#include "compress/sparse/sparse_format.h"

#include <algorithm>
#include <vector>

#include "common/str_cat.h"
#include "compress/bytes.h"

namespace gcagent::compress::sparse {

size_t write(std::span<const uint32_t> indices, std::span<const float> values,
             std::span<std::byte> out) {
  const size_t count = indices.size();
  storeLe<uint32_t>(out.data(), static_cast<uint32_t>(count));
  if (count != 0) {
    std::memcpy(out.data() + 4, indices.data(), 4 * count);
    std::memcpy(out.data() + 4 + 4 * count, values.data(), 4 * count);
  }
  return bytesFor(count);
}

Result<size_t> validate(std::span<const std::byte> in, size_t n, std::string_view codec) {
  if (in.size() < 4)
    return Status::dataLoss(strCat(codec, ": encoded buffer holds ", in.size(),
                                   " bytes, less than the 4-byte count header"));
  const uint32_t count = loadLe<uint32_t>(in.data());
  if (count > n)
    return Status::dataLoss(strCat(codec, ": encoded count ", count, " exceeds the slice length ", n));
  if (in.size() != bytesFor(count))
    return Status::dataLoss(strCat(codec, ": encoded buffer holds ", in.size(), " bytes, but ", count,
                                   " pairs need ", bytesFor(count)));
  // Duplicates would double-count a value; a bitmap finds them in one pass.
  std::vector<bool> seen(n, false);
  const std::byte* idx = in.data() + 4;
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t index = loadLe<uint32_t>(idx + 4 * i);
    if (index >= n)
      return Status::dataLoss(strCat(codec, ": pair ", i, " has index ", index,
                                     ", outside the slice of ", n, " elements"));
    if (seen[index])
      return Status::dataLoss(strCat(codec, ": pair ", i, " repeats index ", index));
    seen[index] = true;
  }
  return static_cast<size_t>(count);
}

void addInto(std::span<const std::byte> in, std::span<float> acc) {
  const uint32_t count = loadLe<uint32_t>(in.data());
  const std::byte* idx = in.data() + 4;
  const std::byte* val = idx + 4 * static_cast<size_t>(count);
  for (uint32_t i = 0; i < count; ++i)
    acc[loadLe<uint32_t>(idx + 4 * i)] += loadLe<float>(val + 4 * i);
}

Status decodeAdd(std::span<const std::byte> in, std::span<float> acc, std::string_view codec) {
  auto count = validate(in, acc.size(), codec);
  if (!count.ok()) return count.status();
  addInto(in, acc);
  return {};
}

Status decode(std::span<const std::byte> in, std::span<float> out, float scale, std::string_view codec) {
  auto count = validate(in, out.size(), codec);
  if (!count.ok()) return count.status();
  std::fill(out.begin(), out.end(), -0.0f);  // -0 * scale is -0 too
  const std::byte* idx = in.data() + 4;
  const std::byte* val = idx + 4 * *count;
  for (size_t i = 0; i < *count; ++i)
    out[loadLe<uint32_t>(idx + 4 * i)] = (-0.0f + loadLe<float>(val + 4 * i)) * scale;
  return {};
}

}  // namespace gcagent::compress::sparse

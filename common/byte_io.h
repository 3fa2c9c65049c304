// Little-endian message building and bounds-checked parsing. A Reader never reads past its
// span: every get fails once the bytes run out, and the first failure sticks.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gcagent {

static_assert(std::endian::native == std::endian::little, "gcagent's wire formats are little-endian");

class ByteWriter {
 public:
  template <class T>
    requires std::is_arithmetic_v<T>
  void put(T v) {
    std::byte bytes[sizeof v];
    std::memcpy(bytes, &v, sizeof v);
    append(bytes, sizeof v);
  }
  // u16 length, then the bytes.
  void putString(std::string_view s) {
    put(static_cast<uint16_t>(s.size()));
    append(reinterpret_cast<const std::byte*>(s.data()), s.size());
  }
  void putBytes(std::span<const std::byte> bytes) { append(bytes.data(), bytes.size()); }
  void patchU32(size_t at, uint32_t v) { std::memcpy(out_.data() + at, &v, sizeof v); }
  size_t size() const { return out_.size(); }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  // Out of line: inlined into a long run of puts, g++ 12 at -O3 tracks the vector's growth
  // wrongly and reports a false overflow (-Wstringop-overflow), whether the bytes go in by
  // insert() or by resize() and memcpy.
  [[gnu::noinline]] void append(const std::byte* bytes, size_t n) { out_.insert(out_.end(), bytes, bytes + n); }

  std::vector<std::byte> out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}

  template <class T>
    requires std::is_arithmetic_v<T>
  bool get(T& v) {
    if (failed_ || in_.size() - pos_ < sizeof v) return fail();
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return true;
  }
  // Reads `length` raw bytes as text.
  bool getChars(std::string& s, size_t length) {
    if (!expect(length)) return false;
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), length);
    pos_ += length;
    return true;
  }
  // Reads `length` raw bytes.
  bool getBytes(std::vector<std::byte>& out, size_t length) {
    if (!expect(length)) return false;
    out.assign(in_.data() + pos_, in_.data() + pos_ + length);
    pos_ += length;
    return true;
  }
  // Fails unless at least `bytes` remain: checks a count against the data before any
  // allocation sized by that count.
  bool expect(size_t bytes) {
    if (failed_ || in_.size() - pos_ < bytes) return fail();
    return true;
  }
  bool failed() const { return failed_; }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }

 private:
  bool fail() {
    failed_ = true;
    return false;
  }
  std::span<const std::byte> in_;
  size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace gcagent

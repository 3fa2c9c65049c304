#include "agent/job_notice.h"

#include <cstring>

#include "common/byte_io.h"
#include "common/str_cat.h"

namespace gcagent::agent {
namespace {
constexpr uint32_t kMagic = 0x4e414347;  // "GCAN"
constexpr uint16_t kVersion = 1;
constexpr size_t kFixedBytes = 24;
constexpr uint32_t kRealignMagic = 0x52414347;  // "GCAR"
constexpr uint16_t kRealignVersion = 1;
constexpr size_t kRealignBytes = 24;

bool hasMagic(std::span<const std::byte> header, uint32_t want) {
  uint32_t magic = 0;
  if (header.size() < sizeof magic) return false;
  std::memcpy(&magic, header.data(), sizeof magic);
  return magic == want;
}
}  // namespace

std::vector<std::byte> encodeJobNotice(const JobNotice& notice) {
  const std::string reason = notice.reason.substr(0, kMaxNoticeReason);
  ByteWriter w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(static_cast<uint16_t>(reason.size()));
  w.put(notice.job);
  w.put(notice.last_completed);
  std::vector<std::byte> out = w.take();
  const auto* chars = reinterpret_cast<const std::byte*>(reason.data());
  out.insert(out.end(), chars, chars + reason.size());
  return out;
}

bool isJobNotice(std::span<const std::byte> header) { return hasMagic(header, kMagic); }

Result<JobNotice> parseJobNotice(std::span<const std::byte> header) {
  ByteReader r(header);
  uint32_t magic = 0;
  uint16_t version = 0, length = 0;
  JobNotice n;
  r.get(magic);
  r.get(version);
  r.get(length);
  r.get(n.job);
  r.get(n.last_completed);
  if (r.failed()) return Status::dataLoss(strCat("job notice: ", header.size(), " bytes, expected at least ", kFixedBytes));
  if (magic != kMagic) return Status::invalidArgument(strCat("job notice: bad magic 0x", std::hex, magic));
  if (version != kVersion) return Status::invalidArgument(strCat("job notice: version ", version, ", expected ", kVersion));
  if (length > kMaxNoticeReason) return Status::invalidArgument(strCat("job notice: reason of ", length, " bytes exceeds ", kMaxNoticeReason));
  if (r.remaining() != length)
    return Status::dataLoss(strCat("job notice: reason of ", length, " bytes, but ", r.remaining(), " follow"));
  r.getChars(n.reason, length);
  return n;
}

std::vector<std::byte> encodeRealignNotice(const RealignNotice& notice) {
  ByteWriter w;
  w.put(kRealignMagic);
  w.put(kRealignVersion);
  w.put(uint16_t{0});
  w.put(notice.job);
  w.put(notice.next);
  return w.take();
}

bool isRealignNotice(std::span<const std::byte> header) { return hasMagic(header, kRealignMagic); }

Result<RealignNotice> parseRealignNotice(std::span<const std::byte> header) {
  if (header.size() != kRealignBytes)
    return Status::dataLoss(strCat("realign notice: ", header.size(), " bytes, expected ", kRealignBytes));
  ByteReader r(header);
  uint32_t magic = 0;
  uint16_t version = 0, zero = 0;
  RealignNotice n;
  r.get(magic);
  r.get(version);
  r.get(zero);
  r.get(n.job);
  r.get(n.next);
  if (magic != kRealignMagic) return Status::invalidArgument(strCat("realign notice: bad magic 0x", std::hex, magic));
  if (version != kRealignVersion)
    return Status::invalidArgument(strCat("realign notice: version ", version, ", expected ", kRealignVersion));
  return n;
}

}  // namespace gcagent::agent

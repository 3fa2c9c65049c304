#include "shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

// Boost.Interprocess throws; this file is the edge that turns throws into Status.
#include <boost/interprocess/shared_memory_object.hpp>

#include "common/str_cat.h"

namespace gcagent::shm {
namespace bip = boost::interprocess;
namespace {

constexpr uint64_t kSlotAlign = 64;

Result<void*> mapFd(int fd, size_t bytes, const std::string& name) {
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    return Status::resourceExhausted(strCat("shm segment ", name, ": mmap of ", bytes, " bytes failed: ", std::strerror(errno)));
  return base;
}

std::optional<uint64_t> freeShmBytes() {
  struct statvfs fs {};
  if (::statvfs("/dev/shm", &fs) != 0) return std::nullopt;
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

Status tooBig(const std::string& name, size_t bytes, uint64_t free_bytes) {
  return Status::resourceExhausted(strCat("shm segment ", name, ": needs ", bytes, " bytes, /dev/shm has ", free_bytes,
                                          " free"));
}

}  // namespace

Result<Segment> Segment::create(const std::string& name, size_t bytes, mode_t mode, std::optional<uid_t> owner,
                                std::optional<gid_t> group) {
  if (bytes == 0) return Status::invalidArgument(strCat("shm segment ", name, ": size 0"));
  if (const auto free_bytes = freeShmBytes(); free_bytes && bytes > *free_bytes) return tooBig(name, bytes, *free_bytes);
  try {
    bip::permissions perms(mode);
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, perms);
    // The umask may have narrowed the mode; set it exactly.
    if (::fchmod(shm.get_mapping_handle().handle, mode) != 0) {
      bip::shared_memory_object::remove(name.c_str());
      return Status::internal(strCat("shm segment ", name, ": fchmod failed: ", std::strerror(errno)));
    }
    // Root needs no segment of its own (it opens any), so an agent that dropped root
    // (agent.user) still serves root trainers.
    if (owner && *owner != ::geteuid() && *owner != 0 && ::fchown(shm.get_mapping_handle().handle, *owner, static_cast<gid_t>(-1)) != 0) {
      bip::shared_memory_object::remove(name.c_str());
      return Status::unavailable(strCat("shm segment ", name, ": cannot give it to uid ", *owner, ": ", std::strerror(errno)));
    }
    if (group && ::fchown(shm.get_mapping_handle().handle, static_cast<uid_t>(-1), *group) != 0) {
      bip::shared_memory_object::remove(name.c_str());
      return Status::unavailable(strCat("shm segment ", name, ": cannot give it to gid ", *group, ": ", std::strerror(errno)));
    }
    shm.truncate(static_cast<bip::offset_t>(bytes));
    // Reserve every page before any is touched: the free space checked above may be gone
    // by now (another segment, another process), and touching a page tmpfs cannot supply
    // is SIGBUS, not an error.
    if (const int rc = ::posix_fallocate(shm.get_mapping_handle().handle, 0, static_cast<off_t>(bytes)); rc != 0) {
      bip::shared_memory_object::remove(name.c_str());
      if (rc == ENOSPC) return tooBig(name, bytes, freeShmBytes().value_or(0));
      return Status::resourceExhausted(strCat("shm segment ", name, ": cannot reserve ", bytes,
                                              " bytes in /dev/shm: ", std::strerror(rc)));
    }
    auto base = mapFd(shm.get_mapping_handle().handle, bytes, name);
    if (!base.ok()) {
      bip::shared_memory_object::remove(name.c_str());
      return base.status();
    }
    // Fault every page in now: first touch costs seconds per GiB, and must not land on the
    // data path (the pages are reserved, so this cannot SIGBUS).
    std::memset(*base, 0, bytes);
    return Segment(name, *base, bytes, true);
  } catch (const bip::interprocess_exception& e) {
    return Status::unavailable(strCat("shm segment ", name, ": create failed: ", e.what()));
  }
}

Result<Segment> Segment::open(const std::string& name) {
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
    bip::offset_t size = 0;
    if (!shm.get_size(size) || size <= 0)
      return Status::failedPrecondition(strCat("shm segment ", name, ": empty or unreadable size"));
    auto base = mapFd(shm.get_mapping_handle().handle, static_cast<size_t>(size), name);
    if (!base.ok()) return base.status();
    const int fd = ::fcntl(shm.get_mapping_handle().handle, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      ::munmap(*base, static_cast<size_t>(size));
      return Status::unavailable(strCat("shm segment ", name, ": dup failed: ", std::strerror(errno)));
    }
    return Segment(name, *base, static_cast<size_t>(size), false, fd);
  } catch (const bip::interprocess_exception& e) {
    return Status::unavailable(strCat("shm segment ", name, ": open failed: ", e.what()));
  }
}

Result<int> Segment::duplicateDescriptor() const {
  if (fd_ < 0) return Status::failedPrecondition(strCat("shm segment ", name_, ": not opened by this process"));
  const int fd = ::fcntl(fd_, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return Status::unavailable(strCat("shm segment ", name_, ": dup failed: ", std::strerror(errno)));
  return fd;
}

Segment::Segment(Segment&& other) noexcept
    : name_(std::move(other.name_)),
      base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owner_(std::exchange(other.owner_, false)),
      fd_(std::exchange(other.fd_, -1)) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, false);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Segment::~Segment() { release(); }

void Segment::unlink() {
  if (owner_) bip::shared_memory_object::remove(name_.c_str());
  owner_ = false;
}

void Segment::release() {
  if (base_ != nullptr) ::munmap(base_, size_);
  if (owner_) bip::shared_memory_object::remove(name_.c_str());
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr;
  owner_ = false;
  fd_ = -1;
}

std::string segmentName(const std::string& prefix, uint32_t trainer_id) {
  return strCat(prefix, "-", ::getpid(), "-", trainer_id);
}

std::vector<std::string> removeOrphanSegments(const std::string& prefix) {
  std::vector<std::string> removed;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return removed;
  const std::string head = prefix + "-";
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, head.size(), head) != 0) continue;
    // "<pid>-<digits>" after the prefix, nothing else: other names are not ours.
    const std::string rest = name.substr(head.size());
    const size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || dash + 1 == rest.size() || dash > 9) continue;
    if (rest.find_first_not_of("0123456789", 0) != dash || rest.find_first_not_of("0123456789", dash + 1) != std::string::npos)
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dash)));
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (::shm_unlink(name.c_str()) == 0) removed.push_back(name);
  }
  ::closedir(dir);
  return removed;
}

SlotLayout layoutSlots(std::span<const uint64_t> tensor_bytes) {
  SlotLayout out;
  uint64_t at = 0;
  for (uint64_t bytes : tensor_bytes) {
    out.offsets.push_back(at);
    at += (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  }
  out.total_bytes = at;
  return out;
}

}  // namespace gcagent::shm

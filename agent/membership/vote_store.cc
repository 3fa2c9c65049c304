#include "agent/membership/vote_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/byte_io.h"
#include "common/str_cat.h"

namespace gcagent::agent {
namespace {

constexpr uint32_t kMagic = 0x53564347;  // "GCVS" in memory order
constexpr uint16_t kVersion = 1;
constexpr size_t kMaxFileBytes = 1 << 20;  // two views of 4096 nodes take 64 KiB

uint32_t fnv1a(std::span<const std::byte> bytes) {
  uint32_t h = 2166136261u;
  for (std::byte b : bytes) h = (h ^ static_cast<uint8_t>(b)) * 16777619u;
  return h;
}

void putView(ByteWriter& w, const MembershipView& v) {
  w.put(v.epoch);
  w.put(v.proposer);
  w.put(v.parent);
  for (const auto* ranks : {&v.members, &v.joined}) {
    w.put(static_cast<uint16_t>(ranks->size()));
    for (uint32_t r : *ranks) w.put(r);
  }
}

bool getView(ByteReader& r, MembershipView& v) {
  r.get(v.epoch);
  r.get(v.proposer);
  r.get(v.parent);
  for (auto* ranks : {&v.members, &v.joined}) {
    uint16_t count = 0;
    if (!r.get(count) || !r.expect(4u * count)) return false;
    ranks->resize(count);
    for (uint32_t& rank : *ranks) r.get(rank);
  }
  return !r.failed();
}

// A view's ranks as a peer frame's are checked (membership_view.h: checkFrame).
Status checkView(const MembershipView& v, uint32_t world, std::string_view what) {
  MembershipNotice n;
  n.view = v;
  if (Status s = checkFrame(n, world); !s.ok()) return Status::invalidArgument(strCat(what, ": ", s.message()));
  return {};
}

// Closes a descriptor on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now: a write the kernel defers may fail only here.
  bool close() { return ::close(std::exchange(fd_, -1)) == 0; }

 private:
  int fd_;
};

Status fileError(std::string_view what, const std::string& file) {
  return Status::unavailable(strCat("cannot keep this node's membership votes: ", what, " ", file, ": ",
                                    std::strerror(errno)));
}

std::string cannotStart(const std::string& path, const std::string& cause, bool another_node) {
  if (another_node)
    return strCat(path, ": ", cause, ": each agent needs an agent.state_dir of its own");
  return strCat(path, ": ", cause, ". The agent does not start: it would vote on the job's membership without the "
                "promises it made before it stopped, and two memberships of one epoch could form. Put the file "
                "back, or start the job's membership afresh: stop every agent of the job, then delete ",
                kVoteFileName, " in every agent's agent.state_dir");
}

}  // namespace

std::vector<std::byte> encodeVoteRecord(const VoteRecord& record, uint32_t self, uint32_t world) {
  ByteWriter w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(uint16_t{0});
  w.put(self);
  w.put(world);
  putView(w, record.installed);
  w.put(record.promised.round);
  w.put(record.promised.node);
  w.put(static_cast<uint8_t>(record.accepted.has_value()));
  if (record.accepted) {
    w.put(record.accepted->first.round);
    w.put(record.accepted->first.node);
    putView(w, record.accepted->second);
  }
  std::vector<std::byte> bytes = w.take();
  const uint32_t sum = fnv1a(bytes);
  bytes.resize(bytes.size() + sizeof sum);
  std::memcpy(bytes.data() + bytes.size() - sizeof sum, &sum, sizeof sum);
  return bytes;
}

Result<VoteRecord> decodeVoteRecord(std::span<const std::byte> bytes, uint32_t self, uint32_t world) {
  ByteReader r(bytes);
  auto truncated = [&] {
    return Status::dataLoss(strCat("truncated: ", bytes.size(), " bytes end inside the record"));
  };
  uint32_t magic = 0, rank = 0, count = 0;
  uint16_t version = 0, reserved = 0;
  r.get(magic);
  r.get(version);
  r.get(reserved);
  if (r.failed()) return truncated();
  if (magic != kMagic) return Status::invalidArgument("not a gcagent vote record (bad magic)");
  if (version != kVersion)
    return Status::invalidArgument(strCat("version ", version, "; this agent reads version ", kVersion));
  VoteRecord v;
  uint8_t accepted = 0;
  r.get(rank);
  r.get(count);
  getView(r, v.installed);
  r.get(v.promised.round);
  r.get(v.promised.node);
  r.get(accepted);
  if (!r.failed() && accepted > 1)
    return Status::invalidArgument(strCat("accepted flag ", int{accepted}, ", not 0 or 1"));
  if (accepted == 1) {
    auto& [ballot, view] = v.accepted.emplace();
    r.get(ballot.round);
    r.get(ballot.node);
    getView(r, view);
  }
  const size_t fields = r.position();
  uint32_t sum = 0;
  r.get(sum);
  if (r.failed()) return truncated();
  if (r.remaining() != 0) return Status::dataLoss(strCat(r.remaining(), " bytes after the record"));
  if (sum != fnv1a(bytes.first(fields))) return Status::dataLoss("checksum mismatch: the file is corrupt");
  if (rank != self || count != world)
    return Status::failedPrecondition(strCat("the votes of node ", rank, " of ", count, "; this agent is node ", self,
                                             " of ", world, " (agent.node_rank, transport.peers)"));
  GC_RETURN_IF_ERROR(checkView(v.installed, world, "installed view"));
  if (v.promised.node >= world) return Status::invalidArgument(strCat("promised ballot of node ", v.promised.node));
  if (v.accepted) {
    const auto& [ballot, view] = *v.accepted;
    GC_RETURN_IF_ERROR(checkView(view, world, "accepted view"));
    if (view.epoch != v.installed.epoch + 1 || view.parentId() != v.installed.id())
      return Status::invalidArgument(strCat("accepted ", view.describe(), " does not follow installed ",
                                            v.installed.describe()));
    if (ballot > v.promised)
      return Status::invalidArgument(strCat("accepted ballot ", ballot.round, ".", ballot.node,
                                            " is above the promised one"));
  }
  return v;
}

std::string describeVotes(const VoteRecord& v) {
  std::string out = strCat("installed ", v.installed.describe(), "; ");
  out += v.promised == Ballot{} ? std::string("nothing promised")
                                : strCat("promised ballot ", v.promised.round, ".", v.promised.node);
  if (v.accepted)
    out += strCat("; accepted ", v.accepted->second.describe(), " at ballot ", v.accepted->first.round, ".",
                  v.accepted->first.node);
  return out;
}

VoteStore::VoteStore(std::string dir, uint32_t self, uint32_t world)
    : dir_(std::move(dir)), path_(strCat(dir_, "/", kVoteFileName)), self_(self), world_(world) {}

Result<VoteStore> VoteStore::open(const std::string& dir, uint32_t self, uint32_t world) {
  if (dir.empty()) return Status::invalidArgument("agent.state_dir: empty");
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT || ::mkdir(dir.c_str(), 0700) != 0)
      return Status::unavailable(strCat("agent.state_dir '", dir, "': ", std::strerror(errno)));
  } else if (!S_ISDIR(st.st_mode)) {
    return Status::invalidArgument(strCat("agent.state_dir '", dir, "' is not a directory"));
  }
  VoteStore store(dir, self, world);
  Fd fd(::open(store.path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 && errno != ENOENT)
    return Status::unavailable(cannotStart(store.path_, strCat("cannot read it: ", std::strerror(errno)), false));
  if (fd.get() >= 0) {
    std::vector<std::byte> bytes(kMaxFileBytes + 1);
    size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        return Status::unavailable(cannotStart(store.path_, strCat("cannot read it: ", std::strerror(errno)), false));
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    if (got > kMaxFileBytes)
      return Status::dataLoss(cannotStart(store.path_, strCat("more than ", kMaxFileBytes, " bytes"), false));
    auto record = decodeVoteRecord(std::span<const std::byte>(bytes).first(got), self, world);
    if (!record.ok())
      return Status(record.status().code(),
                    cannotStart(store.path_, record.status().message(),
                                record.status().code() == StatusCode::kFailedPrecondition));
    store.kept_ = std::move(*record);
  }
  // Written back (or first written) now: a directory that takes no file fails the start,
  // not the first vote.
  VoteRecord now = store.kept_.value_or(VoteRecord{});
  if (!store.kept_)
    for (uint32_t r = 0; r < world; ++r) now.installed.members.push_back(r);
  if (Status s = store.save(now); !s.ok()) return Status(s.code(), strCat("agent.state_dir: ", s.message()));
  return store;
}

Status VoteStore::save(const VoteRecord& record) const {
  const std::vector<std::byte> bytes = encodeVoteRecord(record, self_, world_);
  const std::string temp = path_ + ".new";
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (fd.get() < 0) return fileError("create", temp);
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fileError("write", temp);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return fileError("fsync", temp);
  if (!fd.close()) return fileError("close", temp);
  if (::rename(temp.c_str(), path_.c_str()) != 0) return fileError(strCat("rename ", temp, " to"), path_);
  // The rename is on disk only once the directory is.
  Fd dir(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) return fileError("open the directory", dir_);
  if (::fsync(dir.get()) != 0) return fileError("fsync the directory", dir_);
  return {};
}

VoteKeeping VoteStore::keeping() const {
  return {kept_, [store = *this](const VoteRecord& record) { return store.save(record); }};
}

}  // namespace gcagent::agent

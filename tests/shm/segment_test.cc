#include "shm/segment.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

namespace gcagent::shm {
namespace {

std::string testName(const char* what) { return segmentName("gcagent-test-" + std::string(what), 1); }

TEST(SegmentTest, CreatedOwnerOnlyZeroedAndRemovedOnDestruction) {
  const std::string name = testName("create");
  {
    auto seg = Segment::create(name, 10000);
    ASSERT_TRUE(seg.ok()) << seg.status().toString();
    EXPECT_EQ(seg->bytes().size(), 10000u);
    for (std::byte b : seg->bytes()) ASSERT_EQ(b, std::byte{0});
    struct stat st {};
    ASSERT_EQ(::stat(("/dev/shm/" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name));
}

TEST(SegmentTest, GroupModeIsApplied) {
  auto seg = Segment::create(testName("mode"), 4096, 0660);
  ASSERT_TRUE(seg.ok());
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm/" + seg->name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST(SegmentTest, GivenToTheTrainersUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "changing a segment's owner needs root";
  auto seg = Segment::create(testName("owner"), 4096, 0600, uid_t{4242});
  ASSERT_TRUE(seg.ok()) << seg.status().toString();
  struct stat st {};
  ASSERT_EQ(::stat(("/dev/shm/" + seg->name()).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4242u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(SegmentTest, AnotherProcessSeesTheSameBytes) {
  auto seg = Segment::create(testName("share"), 4096);
  ASSERT_TRUE(seg.ok());
  pid_t child = ::fork();
  if (child == 0) {
    auto opened = Segment::open(seg->name());
    if (!opened.ok() || opened->bytes().size() != 4096) _exit(1);
    std::memcpy(opened->bytes().data() + 100, "gradient", 8);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(std::memcmp(seg->bytes().data() + 100, "gradient", 8), 0);
}

TEST(SegmentTest, ErrorsNameTheSegment) {
  auto first = Segment::create(testName("dup"), 4096);
  ASSERT_TRUE(first.ok());
  auto second = Segment::create(first->name(), 4096);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(first->name()), std::string::npos) << second.status().message();
  auto missing = Segment::open("gcagent-test-no-such-segment");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("gcagent-test-no-such-segment: open failed"), std::string::npos);
  auto huge = Segment::create(testName("huge"), size_t{1} << 50);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("/dev/shm has"), std::string::npos);
}

// A full /dev/shm (a private mount namespace with a 1 MiB tmpfs on it): a segment larger
// than what is left is refused naming /dev/shm and the sizes, leaves nothing behind, and the
// process and its first segment live on.
TEST(SegmentTest, AFullDevShmIsAnErrorNotASignal) {
  if (::geteuid() != 0) GTEST_SKIP() << "a private mount namespace needs root";
  const pid_t child = ::fork();
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0)
      _exit(2);  // no namespaces here: reported as a skip
    auto first = Segment::create(testName("fill-a"), 600 * 1024);
    if (!first.ok()) _exit(3);
    auto second = Segment::create(testName("fill-b"), 600 * 1024);
    if (second.ok()) _exit(4);
    const std::string why = second.status().message();  // status() is a copy
    if (second.status().code() != StatusCode::kResourceExhausted || why.find("/dev/shm has") == std::string::npos ||
        why.find("needs 614400 bytes") == std::string::npos)
      _exit(5);
    // Nothing of the refused segment is left behind, and the first still works.
    if (std::filesystem::exists("/dev/shm/" + testName("fill-b"))) _exit(6);
    std::memset(first->bytes().data(), 1, first->bytes().size());
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "cannot mount a private tmpfs here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The reservation itself, without the free-space check in front: a tmpfs file cannot be
// given more pages than the mount has (posix_fallocate is what create() relies on).
TEST(SegmentTest, ReservingMorePagesThanTmpfsHasFails) {
  if (::geteuid() != 0) GTEST_SKIP() << "a private mount namespace needs root";
  const pid_t child = ::fork();
  if (child == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0)
      _exit(2);
    const int fd = ::open("/dev/shm/reserve", O_RDWR | O_CREAT, 0600);
    if (fd < 0 || ::ftruncate(fd, 4 << 20) != 0) _exit(3);
    _exit(::posix_fallocate(fd, 0, 4 << 20) == ENOSPC ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 2) GTEST_SKIP() << "cannot mount a private tmpfs here";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(SegmentTest, MovedSegmentIsRemovedOnce) {
  const std::string name = testName("move");
  {
    auto seg = Segment::create(name, 4096);
    ASSERT_TRUE(seg.ok());
    Segment moved = std::move(seg).value();
    EXPECT_TRUE(moved.owner());
    EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + name));
  }
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name));
}

TEST(SegmentTest, OrphansOfDeadAgentsAreRemovedAndNothingElse) {
  const std::string prefix = "gcagent-orphan-test-" + std::to_string(::getpid());
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // a pid that no longer runs
  const std::string dead = prefix + "-" + std::to_string(child) + "-3";
  const std::string mine = prefix + "-" + std::to_string(::getpid()) + "-1";
  const std::string init = prefix + "-1-2";  // pid 1 always runs
  const std::string other = prefix + "-" + std::to_string(child) + "-x";
  auto a = Segment::create(dead, 4096);
  auto b = Segment::create(mine, 4096);
  auto c = Segment::create(init, 4096);
  auto d = Segment::create(other, 4096);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(removeOrphanSegments(prefix), std::vector<std::string>{dead});
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + dead));
  for (const auto& kept : {mine, init, other}) EXPECT_TRUE(std::filesystem::exists("/dev/shm/" + kept)) << kept;
}

TEST(SlotLayoutTest, SlotsAreCacheLineAligned) {
  const uint64_t sizes[] = {4, 256, 100, 64};
  SlotLayout layout = layoutSlots(sizes);
  EXPECT_EQ(layout.offsets, (std::vector<uint64_t>{0, 64, 320, 448}));
  EXPECT_EQ(layout.total_bytes, 512u);
}

}  // namespace
}  // namespace gcagent::shm

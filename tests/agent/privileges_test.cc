#include "agent/privileges.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace gcagent::agent {
namespace {

TEST(PrivilegesTest, AnUnknownUserIsNamed) {
  auto user = lookUpUser("no-such-gcagent-user");
  ASSERT_FALSE(user.ok());
  EXPECT_EQ(user.status().message(), "agent.user 'no-such-gcagent-user': no such user");
}

TEST(PrivilegesTest, AUidBeyondAnyUidIsNoSuchUser) {
  auto user = lookUpUser("99999999999999999999999");
  ASSERT_FALSE(user.ok());
  EXPECT_EQ(user.status().message(), "agent.user '99999999999999999999999': no such user");
}

TEST(PrivilegesTest, TheAgentsOwnUserIsFoundByNameAndByNumber) {
  const passwd* me = ::getpwuid(::geteuid());
  ASSERT_NE(me, nullptr);
  for (const std::string& name : {std::string(me->pw_name), std::to_string(me->pw_uid)}) {
    auto user = lookUpUser(name);
    ASSERT_TRUE(user.ok()) << user.status().message();
    EXPECT_EQ(user->uid, me->pw_uid);
    EXPECT_EQ(user->gid, me->pw_gid);
    EXPECT_EQ(user->name, me->pw_name);
    EXPECT_TRUE(dropPrivileges(*user).ok());  // already that user: nothing to do
  }
}

TEST(PrivilegesTest, OnlyRootMayBecomeAnotherUser) {
  if (::geteuid() == 0) GTEST_SKIP() << "runs as root";
  auto user = lookUpUser("root");
  ASSERT_FALSE(user.ok());
  EXPECT_EQ(user.status().message(), "agent.user 'root': only an agent started as root can become another user");
}

std::string statusLine(const std::string& key) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return line.substr(key.size() + 1);
  return "";
}

// Root dropped for good: every id is the user's, no capability is left, setuid(0) fails.
// Done in a child, as the drop cannot be undone.
TEST(PrivilegesTest, RootIsDroppedForGood) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  auto user = lookUpUser("nobody");
  if (!user.ok()) GTEST_SKIP() << user.status().message();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!dropPrivileges(*user).ok()) ::_exit(1);
    uid_t r, e, s;
    if (::getresuid(&r, &e, &s) != 0 || r != user->uid || e != user->uid || s != user->uid) ::_exit(2);
    if (::getegid() != user->gid || ::getgid() != user->gid) ::_exit(3);
    if (statusLine("CapEff").find_first_not_of("\t 0") != std::string::npos) ::_exit(4);
    if (::setuid(0) == 0) ::_exit(5);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: drop failed, 2: uid, 3: gid, 4: capabilities left, 5: root regained";
}

}  // namespace
}  // namespace gcagent::agent

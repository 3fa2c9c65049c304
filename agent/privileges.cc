#include "agent/privileges.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <vector>

#include "common/str_cat.h"

namespace gcagent::agent {
namespace {

Status failed(const UserIds& user, const char* call) {
  return Status::failedPrecondition(strCat("agent.user '", user.name, "': ", call, " failed: ", std::strerror(errno)));
}

}  // namespace

Result<UserIds> lookUpUser(const std::string& name) {
  std::vector<char> buffer(16384);
  passwd entry{};
  passwd* found = nullptr;
  int rc = ::getpwnam_r(name.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (found == nullptr && !name.empty() && name.find_first_not_of("0123456789") == std::string::npos) {
    errno = 0;
    const unsigned long long uid = std::strtoull(name.c_str(), nullptr, 10);
    if (errno == 0 && uid <= std::numeric_limits<uid_t>::max())
      rc = ::getpwuid_r(static_cast<uid_t>(uid), &entry, buffer.data(), buffer.size(), &found);
  }
  if (found == nullptr)
    return Status::notFound(strCat("agent.user '", name, "': no such user", rc != 0 ? strCat(" (", std::strerror(rc), ")") : ""));
  UserIds user{found->pw_name, found->pw_uid, found->pw_gid};
  if (::geteuid() != 0 && user.uid != ::geteuid())
    return Status::failedPrecondition(strCat("agent.user '", name, "': only an agent started as root can become another user"));
  return user;
}

Status dropPrivileges(const UserIds& user) {
  if (::geteuid() != 0) return {};  // already the user (lookUpUser checked)
  if (::initgroups(user.name.c_str(), user.gid) != 0 && ::setgroups(0, nullptr) != 0) return failed(user, "setgroups");
  if (::setresgid(user.gid, user.gid, user.gid) != 0) return failed(user, "setresgid");
  if (::setresuid(user.uid, user.uid, user.uid) != 0) return failed(user, "setresuid");
  if (user.uid != 0 && (::setuid(0) == 0 || ::geteuid() == 0))
    return Status::internal(strCat("agent.user '", user.name, "': root could be regained after dropping it"));
  return {};
}

}  // namespace gcagent::agent

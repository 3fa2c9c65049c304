// Least privilege: the agent may start as root (to bind, to hand segments to trainers of
// another uid, to read a token only root can read) and then become agent.user for the rest
// of its life, once everything it listens on is bound.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace gcagent::agent {

struct UserIds {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;  // the user's primary group
};

// Looks `name` up (a user name or a numeric uid). Switching to another user needs root: a
// non-root agent may name only itself.
Result<UserIds> lookUpUser(const std::string& name);

// Becomes `user` for good: supplementary groups, then the group, then the user (all of
// real, effective and saved, so root cannot be regained); every capability goes with root.
// Checked after the fact: an agent that asked to drop root and still has it refuses to run.
Status dropPrivileges(const UserIds& user);

}  // namespace gcagent::agent

// The two-process GPU tests run one side in a forked child.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>

namespace gcagent::testing {

// Runs `body` in a child process and returns its exit status (128 if it did not exit).
inline int inChild(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int code = body();
    std::fflush(stderr);
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace gcagent::testing

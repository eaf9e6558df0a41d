// SPDX-License-Identifier: Apache-2.0
// RunCommand: runs a shell command for a test and returns its exit code (-1
// if it did not exit normally) and everything it printed (stdout+stderr);
// StartCommand / WaitCommand: the same in the background.
#ifndef SROUTE_TESTS_UTIL_RUN_COMMAND_H_
#define SROUTE_TESTS_UTIL_RUN_COMMAND_H_

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace sroute::testing {

inline std::pair<int, std::string> RunCommand(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  const int rc = pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

// The non-empty lines of a command's output.
inline std::vector<std::string> OutputLines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Starts a shell command in the background, its stdout and stderr in
// `output_file` (/dev/null if empty); returns its pid (-1 if it could not
// fork). The caller signals it and reaps it with WaitCommand.
inline pid_t StartCommand(const std::string& cmd,
                          const std::string& output_file = "") {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd =
        output_file.empty()
            ? open("/dev/null", O_WRONLY)
            : open(output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

// Reaps a command of StartCommand: its exit code, or -1 if a signal ended
// it.
inline int WaitCommand(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_RUN_COMMAND_H_

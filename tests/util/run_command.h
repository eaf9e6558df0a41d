// RunCommand: runs a shell command for a test and returns its exit code (-1
// if it did not exit normally) and everything it printed (stdout+stderr).
#ifndef SROUTE_TESTS_UTIL_RUN_COMMAND_H_
#define SROUTE_TESTS_UTIL_RUN_COMMAND_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

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

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_RUN_COMMAND_H_

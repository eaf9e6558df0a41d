// The threads of a process as /proc shows them, for tests that watch a
// daemon's threads (stopped, waiting on FUSE, named).
#ifndef SROUTE_TESTS_UTIL_PROCESS_THREADS_H_
#define SROUTE_TESTS_UTIL_PROCESS_THREADS_H_

#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace sroute::testing {

// The contents of /proc/PID/task/TID/`name` for every thread of `pid`
// (empty if the process is gone).
inline std::vector<std::string> ThreadFiles(pid_t pid,
                                            const std::string& name) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(
           "/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / name);
    out.emplace_back(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
  }
  return out;
}

// The ids of the threads of `pid` named `comm` (as /proc shows the name).
inline std::vector<std::string> ThreadIdsNamed(pid_t pid,
                                               const std::string& comm) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(
           "/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "comm");
    std::string name;
    if (std::getline(in, name) && name == comm) {
      out.push_back(task.path().filename().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Polls ThreadFiles(pid, name) every 10 ms until `done` holds for them;
// false if it does not within 10 s.
inline bool WaitForThreadFiles(
    pid_t pid, const std::string& name,
    const std::function<bool(const std::vector<std::string>&)>& done) {
  for (int i = 0; i < 1000; ++i) {
    if (done(ThreadFiles(pid, name))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The nice value of every thread of `pid` (field 19 of its stat file).
inline std::vector<int> ThreadNices(pid_t pid) {
  std::vector<int> out;
  for (const std::string& line : ThreadFiles(pid, "stat")) {
    const size_t paren = line.rfind(')');
    if (paren == std::string::npos) continue;  // the thread just ended
    // Fields after the command's closing parenthesis start at field 3.
    std::istringstream rest(line.substr(paren + 1));
    std::string field;
    int i = 3;
    while (i <= 19 && rest >> field) ++i;
    if (i == 20) out.push_back(std::stoi(field));
  }
  return out;
}

// True once every thread of `pid` is in the stopped state ('T' in
// /proc/PID/task/TID/stat), within 10 s. kill(SIGSTOP) only queues the
// stop: until this holds, the process may still answer a request.
inline bool WaitAllThreadsStopped(pid_t pid) {
  return WaitForThreadFiles(
      pid, "stat", [](const std::vector<std::string>& stats) {
        for (const std::string& line : stats) {
          const size_t paren = line.rfind(')');
          if (paren == std::string::npos || paren + 2 >= line.size() ||
              line[paren + 2] != 'T') {
            return false;
          }
        }
        return !stats.empty();
      });
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_PROCESS_THREADS_H_

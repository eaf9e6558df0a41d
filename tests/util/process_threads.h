// SPDX-License-Identifier: Apache-2.0
// The threads of a process as /proc shows them, for tests that watch a
// daemon's threads (stopped, waiting on FUSE, named).
#ifndef SROUTE_TESTS_UTIL_PROCESS_THREADS_H_
#define SROUTE_TESTS_UTIL_PROCESS_THREADS_H_

#include <sys/types.h>
#include <unistd.h>

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

// /proc/PID/task/TID for every thread of `pid` (none if the process is
// gone).
inline std::vector<std::filesystem::path> ThreadDirs(pid_t pid) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(
           "/proc/" + std::to_string(pid) + "/task", ec)) {
    out.push_back(task.path());
  }
  return out;
}

// The contents of /proc/PID/task/TID/`name` for every thread of `pid`.
inline std::vector<std::string> ThreadFiles(pid_t pid,
                                            const std::string& name) {
  std::vector<std::string> out;
  for (const auto& dir : ThreadDirs(pid)) {
    std::ifstream in(dir / name);
    out.emplace_back(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
  }
  return out;
}

// The ids of every thread of `pid`.
inline std::vector<std::string> ThreadIdsOf(pid_t pid) {
  std::vector<std::string> out;
  for (const auto& dir : ThreadDirs(pid)) {
    out.push_back(dir.filename().string());
  }
  return out;
}

// The ids of the threads of `pid` named `comm` (as /proc shows the name).
inline std::vector<std::string> ThreadIdsNamed(pid_t pid,
                                               const std::string& comm) {
  std::vector<std::string> out;
  for (const auto& dir : ThreadDirs(pid)) {
    std::ifstream in(dir / "comm");
    std::string name;
    if (std::getline(in, name) && name == comm) {
      out.push_back(dir.filename().string());
    }
  }
  return out;
}

// Field `n` (1-based, as in proc(5)) of a /proc/.../stat line; empty if the
// line is cut short (the thread just ended). Counting starts after the
// command's closing parenthesis, since the command may hold spaces.
inline std::string StatField(const std::string& line, int n) {
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return "";
  std::istringstream rest(line.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= n; ++i) {
    if (!(rest >> field)) return "";
  }
  return field;
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

// The nice value of every thread of `pid`.
inline std::vector<int> ThreadNices(pid_t pid) {
  std::vector<int> out;
  for (const std::string& line : ThreadFiles(pid, "stat")) {
    const std::string nice = StatField(line, 19);
    if (!nice.empty()) out.push_back(std::stoi(nice));
  }
  return out;
}

// True once every thread of `pid` is in the stopped state ('T' in
// /proc/PID/task/TID/stat), within 10 s. kill(SIGSTOP) only queues the
// stop: until this holds, the process may still answer a request.
inline bool WaitAllThreadsStopped(pid_t pid) {
  return WaitForThreadFiles(
      pid, "stat", [](const std::vector<std::string>& stats) {
        return !stats.empty() &&
               std::all_of(stats.begin(), stats.end(), [](const auto& line) {
                 return StatField(line, 3) == "T";
               });
      });
}

// CPU time (user and system) `pid` has used, in seconds; -1 if it is gone.
inline double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return -1;
  const std::string utime = StatField(line, 14), stime = StatField(line, 15);
  if (utime.empty() || stime.empty()) return -1;
  return static_cast<double>(std::stoll(utime) + std::stoll(stime)) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The file status flags (O_*) of `pid`'s first descriptor open on `target`
// (as /proc/PID/fd shows it, e.g. "/dev/fuse"); -1 if there is none.
inline int DescriptorFlags(pid_t pid, const std::string& target) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator(proc + "/fd", ec)) {
    std::error_code link_ec;
    if (std::filesystem::read_symlink(fd.path(), link_ec) != target) continue;
    std::ifstream info(proc + "/fdinfo/" + fd.path().filename().string());
    std::string key;
    while (info >> key) {
      std::string value;
      info >> value;
      if (key == "flags:") return std::stoi(value, nullptr, 8);
    }
  }
  return -1;
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_PROCESS_THREADS_H_

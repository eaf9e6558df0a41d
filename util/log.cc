#include "util/log.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "util/mutex.h"

namespace sroute {
namespace {
// Guards the tag, and keeps this process's lines whole (a line longer than
// PIPE_BUF could otherwise interleave with another thread's). A leaf.
Mutex& LogMutex() {
  static Mutex mu;
  return mu;
}
std::string& Tag() ABSL_EXCLUSIVE_LOCKS_REQUIRED(LogMutex()) {
  static std::string tag = "sroute";
  return tag;
}
}  // namespace

void SetLogTag(std::string_view tag) {
  MutexLock l(&LogMutex());
  Tag() = std::string(tag);
}

void LogLine(std::string_view severity, std::string_view text) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm utc{};
  gmtime_r(&ts.tv_sec, &utc);
  char when[32];
  strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &utc);
  const int ms = static_cast<int>(ts.tv_nsec / 1000000) % 1000;
  std::string line = StrCat(
      severity, " ", when, ".", static_cast<char>('0' + ms / 100),
      static_cast<char>('0' + ms / 10 % 10), static_cast<char>('0' + ms % 10));
  MutexLock l(&LogMutex());
  StrAppend(&line, "Z ", Tag(), ": ", text, "\n");
  // One write per line, so lines of several processes sharing stderr do
  // not interleave.
  if (write(STDERR_FILENO, line.data(), line.size()) < 0) {
    // Nowhere left to report it.
  }
}

}  // namespace sroute

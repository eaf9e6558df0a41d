#include "util/log.h"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>

namespace sroute {
namespace {
std::mutex& LogMutex() {
  static std::mutex mu;
  return mu;
}
std::string& Tag() {
  static std::string tag = "sroute";
  return tag;
}
}  // namespace

void SetLogTag(std::string_view tag) {
  std::lock_guard<std::mutex> l(LogMutex());
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
  std::lock_guard<std::mutex> l(LogMutex());
  StrAppend(&line, "Z ", Tag(), ": ", text, "\n");
  // One write per line, so lines of several processes sharing stderr do
  // not interleave.
  if (write(STDERR_FILENO, line.data(), line.size()) < 0) {
    // Nowhere left to report it.
  }
}

}  // namespace sroute

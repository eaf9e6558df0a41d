// SPDX-License-Identifier: Apache-2.0
#include "util/log.h"

#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
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
bool& ToSyslog() ABSL_EXCLUSIVE_LOCKS_REQUIRED(LogMutex()) {
  static bool to_syslog = false;
  return to_syslog;
}
}  // namespace

void LogToSyslog() {
  MutexLock l(&LogMutex());
  // openlog keeps the pointer: the tag's storage lives as long as the
  // process (SetLogTag is called once, before this).
  openlog(Tag().c_str(), LOG_PID, LOG_DAEMON);
  ToSyslog() = true;
}

void SetLogTag(std::string_view tag) {
  MutexLock l(&LogMutex());
  Tag() = std::string(tag);
}

bool IsJournalStream(const char* journal_stream, int fd) {
  if (journal_stream == nullptr) return false;
  unsigned long long dev = 0, ino = 0;
  if (sscanf(journal_stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  return fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

std::string FormatLogLines(std::string_view severity, std::string_view text,
                           std::string_view tag, bool journal) {
  std::string prefix;
  if (journal) {
    prefix = StrCat("<",
                    severity == "E"   ? 3
                    : severity == "W" ? 4
                                      : 6,
                    ">", tag, ": ");
  } else {
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    tm utc{};
    gmtime_r(&ts.tv_sec, &utc);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &utc);
    const int ms = static_cast<int>(ts.tv_nsec / 1000000) % 1000;
    prefix = StrCat(severity, " ", when, ".", static_cast<char>('0' + ms / 100),
                    static_cast<char>('0' + ms / 10 % 10),
                    static_cast<char>('0' + ms % 10), "Z ", tag, ": ");
  }
  if (!journal) return StrCat(prefix, text, "\n");
  // The journal takes each line as an entry: each keeps the priority.
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (end > start || start == 0) {
      StrAppend(&out, prefix, text.substr(start, end - start), "\n");
    }
    start = end + 1;
  }
  return out;
}

namespace {

int Rank(std::string_view severity) {
  return severity == "E" ? 2 : severity == "W" ? 1 : 0;
}

std::atomic<int>& LeastRank() {
  static std::atomic<int> least{0};
  return least;
}

}  // namespace

void SetLogLeastSeverity(std::string_view least) {
  LeastRank().store(Rank(least));
}

void LogLine(std::string_view severity, std::string_view text) {
  if (Rank(severity) < LeastRank().load(std::memory_order_relaxed)) return;
  static const bool journal =
      IsJournalStream(getenv("JOURNAL_STREAM"), STDERR_FILENO);
  MutexLock l(&LogMutex());
  if (ToSyslog()) {
    const int priority = severity == "E"   ? LOG_ERR
                         : severity == "W" ? LOG_WARNING
                                           : LOG_INFO;
    size_t start = 0;
    while (start <= text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      if (end > start || start == 0) {
        const std::string line(text.substr(start, end - start));
        syslog(priority, "%s", line.c_str());
      }
      start = end + 1;
    }
    return;
  }
  const std::string lines = FormatLogLines(severity, text, Tag(), journal);
  // One write per event, so lines of several processes sharing stderr do
  // not interleave.
  if (write(STDERR_FILENO, lines.data(), lines.size()) < 0) {
    // Nowhere left to report it.
  }
}

}  // namespace sroute

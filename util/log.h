// SPDX-License-Identifier: Apache-2.0
// Minimal logging for daemons: one line per event on stderr, with a UTC
// timestamp and the process's tag ("sroute-server", ...). Not for the
// per-IO path (it takes a lock and formats).
//
// Under systemd, when stderr is the journal (JOURNAL_STREAM names it), each
// line is "<PRIORITY>TAG: TEXT" instead (sd-daemon(3) prefixes: 3 error,
// 4 warning, 6 info): the journal keeps the severity and its own time.
// A daemon that leaves its terminal (host/detach.h) logs to syslog instead
// (LogToSyslog), which the journal collects too.
#ifndef SROUTE_UTIL_LOG_H_
#define SROUTE_UTIL_LOG_H_

#include <string>
#include <string_view>

#include "util/strings.h"

namespace sroute {

// Sets the tag printed at the start of every line. Call once at start.
void SetLogTag(std::string_view tag);
// From now on every line goes to syslog (facility daemon, the tag as its
// ident, the severity as its priority), not to stderr.
void LogToSyslog();
void LogLine(std::string_view severity, std::string_view text);
// Drops lines of a severity below `least` ("I" < "W" < "E"): sroute-sim
// keeps the apps it replays pass after pass from repeating every note.
void SetLogLeastSeverity(std::string_view least);

// What LogLine writes for `text` (one or more lines) at `severity` ("I",
// "W", "E"): timestamped lines, or journal lines if `journal`. Exposed for
// tests.
std::string FormatLogLines(std::string_view severity, std::string_view text,
                           std::string_view tag, bool journal);
// Whether `journal_stream` (the JOURNAL_STREAM variable, "DEV:INODE", may
// be null) names the file open on `fd`.
bool IsJournalStream(const char* journal_stream, int fd);

template <typename... Args>
void LogInfo(const Args&... args) {
  LogLine("I", StrCat(args...));
}
template <typename... Args>
void LogWarning(const Args&... args) {
  LogLine("W", StrCat(args...));
}
template <typename... Args>
void LogError(const Args&... args) {
  LogLine("E", StrCat(args...));
}

}  // namespace sroute

#endif  // SROUTE_UTIL_LOG_H_

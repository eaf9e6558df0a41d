// Minimal logging for daemons: one line per event on stderr, with a UTC
// timestamp and the process's tag ("sroute-server", ...). Not for the
// per-IO path (it takes a lock and formats).
#ifndef SROUTE_UTIL_LOG_H_
#define SROUTE_UTIL_LOG_H_

#include <string_view>

#include "util/strings.h"

namespace sroute {

// Sets the tag printed at the start of every line. Call once at start.
void SetLogTag(std::string_view tag);
void LogLine(std::string_view severity, std::string_view text);

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

// SPDX-License-Identifier: Apache-2.0
// Small string helpers over std::string_view. (Debian's abseil is built with
// its own string_view type, so absl::StrCat does not accept std::string_view.)
#ifndef SROUTE_UTIL_STRINGS_H_
#define SROUTE_UTIL_STRINGS_H_

#include <charconv>
#include <concepts>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sroute {

namespace strings_internal {
inline void Append(std::string* out, std::string_view s) { out->append(s); }
inline void Append(std::string* out, const char* s) { out->append(s); }
inline void Append(std::string* out, const std::string& s) { out->append(s); }
inline void Append(std::string* out, char c) { out->push_back(c); }
inline void Append(std::string* out, absl::string_view s) {
  out->append(s.data(), s.size());
}
template <std::integral T>
requires(!std::same_as<T, char> &&
         !std::same_as<T, bool>) void Append(std::string* out, T v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}
inline void Append(std::string* out, bool b) {
  out->append(b ? "true" : "false");
}
void Append(std::string* out, double v);
}  // namespace strings_internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (strings_internal::Append(&out, args), ...);
  return out;
}

template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  (strings_internal::Append(out, args), ...);
}

// Splits on every `sep`; "a,,b" gives {"a", "", "b"}, "" gives {""}.
std::vector<std::string_view> StrSplit(std::string_view s, char sep);

// `s` as XML text or an attribute's value: & < > " ' escaped (SVG plots).
std::string XmlEscape(std::string_view s);

// A byte count: decimal digits, optionally followed by K, M, G or T
// (powers of 1024, either case), all of `s`. False on anything else or on
// overflow.
bool ParseByteSize(std::string_view s, uint64_t* out);

// Parses "HOST:PORT" ("[V6]:PORT" too); InvalidArgument naming `what`.
absl::Status SplitHostPort(const std::string& address, std::string* host,
                           uint16_t* port, const std::string& what = "address");

// Transparent hashing so maps keyed by std::string accept string_view lookups.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return std::hash<std::string_view>{}(s);
  }
};
struct StringEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const {
    return a == b;
  }
};

}  // namespace sroute

#endif  // SROUTE_UTIL_STRINGS_H_

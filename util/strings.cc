// SPDX-License-Identifier: Apache-2.0
#include "util/strings.h"

#include <charconv>
#include <cstdio>
#include <limits>

namespace sroute {
namespace strings_internal {

void Append(std::string* out, double v) {
  char buf[32];
  int n = std::snprintf(buf, sizeof(buf), "%g", v);
  out->append(buf, n > 0 ? static_cast<size_t>(n) : 0);
}

}  // namespace strings_internal

std::vector<std::string_view> StrSplit(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

bool ParseByteSize(std::string_view s, uint64_t* out) {
  uint64_t unit = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k':
        unit = uint64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        unit = uint64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        unit = uint64_t{1} << 30;
        break;
      case 'T':
      case 't':
        unit = uint64_t{1} << 40;
        break;
      default:
        break;
    }
    if (unit != 1) s.remove_suffix(1);
  }
  uint64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() ||
      n > std::numeric_limits<uint64_t>::max() / unit) {
    return false;
  }
  *out = n * unit;
  return true;
}

absl::Status SplitHostPort(const std::string& address, std::string* host,
                           uint16_t* port, const std::string& what) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        StrCat(what, " '", address, "' is not HOST:PORT"));
  }
  std::string h = address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);
  }
  const std::string p = address.substr(colon + 1);
  unsigned value = 0;
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
  if (ec != std::errc() || end != p.data() + p.size() || value > 65535) {
    return absl::InvalidArgumentError(
        StrCat(what, " '", address, "': bad port '", p, "'"));
  }
  *host = std::move(h);
  *port = static_cast<uint16_t>(value);
  return absl::OkStatus();
}

}  // namespace sroute

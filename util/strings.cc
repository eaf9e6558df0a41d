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

}  // namespace sroute

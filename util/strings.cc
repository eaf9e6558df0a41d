#include "util/strings.h"

#include <cstdio>

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

}  // namespace sroute

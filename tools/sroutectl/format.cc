// SPDX-License-Identifier: Apache-2.0
#include "tools/sroutectl/format.h"

#include <algorithm>
#include <charconv>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace sroute::ctl {

bool ReadInput(const std::string& path, std::string* out) {
  std::stringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::cerr << "sroutectl: cannot read " << path << "\n";
      return false;
    }
    ss << in.rdbuf();
  }
  *out = ss.str();
  return true;
}

std::string Printf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(n > 0 ? n : 0, '\0');
  std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

bool ParseId(const std::string& s, uint64_t* id) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *id);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      out += row[i];
      if (i + 1 < row.size()) {
        out += std::string(width[i] - row[i].size() + 2, ' ');
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace sroute::ctl

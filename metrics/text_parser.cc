// SPDX-License-Identifier: Apache-2.0
#include "metrics/text_parser.h"

#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "util/strings.h"

namespace sroute::metrics {
namespace {

bool NameChar(char c, bool first) {
  const bool alpha =
      (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
  return alpha || (!first && c >= '0' && c <= '9');
}

// Reads a name at *pos (metric names allow ':', label names do not).
std::string ReadName(std::string_view line, size_t* pos, bool colon) {
  size_t start = *pos;
  while (*pos < line.size() && NameChar(line[*pos], *pos == start) &&
         (colon || line[*pos] != ':')) {
    ++*pos;
  }
  return std::string(line.substr(start, *pos - start));
}

absl::StatusOr<double> ParseValue(std::string_view text) {
  if (text == "+Inf" || text == "Inf") return HUGE_VAL;
  if (text == "-Inf") return -HUGE_VAL;
  if (text == "NaN") return std::nan("");
  double v = 0;
  if (!absl::SimpleAtod(absl::string_view(text.data(), text.size()), &v)) {
    return absl::InvalidArgumentError(StrCat("bad value '", text, "'"));
  }
  return v;
}

absl::StatusOr<Sample> ParseSample(std::string_view line) {
  Sample s;
  size_t pos = 0;
  s.name = ReadName(line, &pos, /*colon=*/true);
  if (s.name.empty()) return absl::InvalidArgumentError("no metric name");
  if (pos < line.size() && line[pos] == '{') {
    ++pos;
    while (pos < line.size() && line[pos] != '}') {
      std::string key = ReadName(line, &pos, /*colon=*/false);
      if (key.empty()) return absl::InvalidArgumentError("bad label name");
      if (pos + 1 >= line.size() || line[pos] != '=' || line[pos + 1] != '"') {
        return absl::InvalidArgumentError(
            StrCat("label ", key, ": expected =\"VALUE\""));
      }
      pos += 2;
      std::string value;
      for (;;) {
        if (pos >= line.size()) {
          return absl::InvalidArgumentError(
              StrCat("label ", key, ": unterminated value"));
        }
        const char c = line[pos++];
        if (c == '"') break;
        if (c != '\\') {
          value.push_back(c);
          continue;
        }
        if (pos >= line.size()) {
          return absl::InvalidArgumentError("escape at the end of a line");
        }
        const char e = line[pos++];
        if (e == 'n') {
          value.push_back('\n');
        } else if (e == '\\' || e == '"') {
          value.push_back(e);
        } else {
          return absl::InvalidArgumentError(
              StrCat("label ", key, ": bad escape \\", std::string(1, e)));
        }
      }
      if (!s.labels.emplace(key, std::move(value)).second) {
        return absl::InvalidArgumentError(StrCat("label ", key, " twice"));
      }
      if (pos < line.size() && line[pos] == ',') ++pos;
    }
    if (pos >= line.size()) return absl::InvalidArgumentError("missing '}'");
    ++pos;
  }
  if (pos >= line.size() || line[pos] != ' ') {
    return absl::InvalidArgumentError("expected ' ' before the value");
  }
  std::vector<std::string_view> rest;
  for (std::string_view part : StrSplit(line.substr(pos + 1), ' ')) {
    if (!part.empty()) rest.push_back(part);
  }
  if (rest.empty() || rest.size() > 2) {
    return absl::InvalidArgumentError("expected VALUE [TIMESTAMP]");
  }
  auto v = ParseValue(rest[0]);
  if (!v.ok()) return v.status();
  s.value = *v;
  return s;
}

// The family a sample belongs to, given the types declared.
std::string FamilyOf(const ParsedMetrics& m, const std::string& name) {
  if (m.types.contains(name)) return name;
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      std::string base = name.substr(0, name.size() - suffix.size());
      auto it = m.types.find(base);
      if (it != m.types.end() && it->second == MetricType::kHistogram) {
        return base;
      }
    }
  }
  return "";
}

std::string SeriesKey(const std::string& name,
                      const std::map<std::string, std::string>& labels,
                      std::string_view skip = "") {
  std::string key = name;
  for (const auto& [k, v] : labels) {
    if (k == skip) continue;
    key += StrCat("\x1f", k, "=", v);
  }
  return key;
}

absl::Status CheckHistograms(const ParsedMetrics& m) {
  // Per series (labels but le): buckets in order, cumulative, +Inf last
  // and equal to _count.
  std::map<std::string, std::vector<std::pair<double, double>>> buckets;
  std::map<std::string, double> counts;
  for (const Sample& s : m.samples) {
    const std::string family = FamilyOf(m, s.name);
    if (m.types.find(family)->second != MetricType::kHistogram) continue;
    if (s.name == family + "_bucket") {
      auto le = s.labels.find("le");
      if (le == s.labels.end()) {
        return absl::InvalidArgumentError(
            StrCat(s.name, ": a bucket without le"));
      }
      auto bound = ParseValue(le->second);
      if (!bound.ok()) return bound.status();
      buckets[SeriesKey(family, s.labels, "le")].emplace_back(*bound, s.value);
    } else if (s.name == family + "_count") {
      counts[SeriesKey(family, s.labels)] = s.value;
    }
  }
  for (const auto& [series, list] : buckets) {
    for (size_t i = 1; i < list.size(); ++i) {
      if (list[i].first <= list[i - 1].first ||
          list[i].second < list[i - 1].second) {
        return absl::InvalidArgumentError(
            StrCat("histogram ", series, ": buckets not cumulative"));
      }
    }
    if (list.empty() || list.back().first != HUGE_VAL) {
      return absl::InvalidArgumentError(
          StrCat("histogram ", series, ": no le=\"+Inf\" bucket"));
    }
    auto c = counts.find(series);
    if (c == counts.end() || c->second != list.back().second) {
      return absl::InvalidArgumentError(
          StrCat("histogram ", series, ": _count differs from le=\"+Inf\""));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<const Sample*> ParsedMetrics::Find(
    std::string_view name,
    const std::map<std::string, std::string>& match) const {
  std::vector<const Sample*> out;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool all = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) all = false;
    }
    if (all) out.push_back(&s);
  }
  return out;
}

std::optional<double> ParsedMetrics::Sum(
    std::string_view name,
    const std::map<std::string, std::string>& match) const {
  auto found = Find(name, match);
  if (found.empty()) return std::nullopt;
  double sum = 0;
  for (const Sample* s : found) sum += s->value;
  return sum;
}

absl::StatusOr<ParsedMetrics> ParseMetrics(std::string_view text) {
  ParsedMetrics m;
  std::set<std::string> series;
  int number = 0;
  for (std::string_view line : StrSplit(text, '\n')) {
    ++number;
    auto fail = [number](std::string_view why) {
      return absl::InvalidArgumentError(StrCat("line ", number, ": ", why));
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      // "# HELP NAME TEXT" or "# TYPE NAME TYPE"; other lines starting
      // with '#' are comments.
      std::vector<std::string_view> parts;
      size_t at = 0;
      while (parts.size() < 3) {
        const size_t space = line.find(' ', at);
        if (space == std::string_view::npos) break;
        parts.push_back(line.substr(at, space - at));
        at = space + 1;
      }
      parts.push_back(line.substr(at));
      if (parts.size() < 3 || (parts[1] != "HELP" && parts[1] != "TYPE")) {
        continue;  // a comment
      }
      const std::string name(parts[2]);
      if (parts[1] == "HELP") {
        m.help[name] = parts.size() > 3 ? std::string(parts[3]) : "";
        continue;
      }
      const std::string_view type = parts.size() > 3 ? parts[3] : "";
      MetricType t;
      if (type == "counter") {
        t = MetricType::kCounter;
      } else if (type == "gauge") {
        t = MetricType::kGauge;
      } else if (type == "histogram") {
        t = MetricType::kHistogram;
      } else {
        return fail(StrCat("unknown type '", type, "'"));
      }
      if (!m.types.emplace(name, t).second) {
        return fail(StrCat("TYPE of ", name, " twice"));
      }
      continue;
    }
    auto s = ParseSample(line);
    if (!s.ok()) return fail(std::string(s.status().message()));
    const std::string family = FamilyOf(m, s->name);
    if (family.empty()) {
      return fail(StrCat(s->name, " has no TYPE before it"));
    }
    if (m.types.find(family)->second == MetricType::kCounter && s->value < 0) {
      return fail(StrCat(s->name, ": a negative counter"));
    }
    if (!series.insert(SeriesKey(s->name, s->labels)).second) {
      return fail(StrCat(s->name, ": the same series twice"));
    }
    m.samples.push_back(*std::move(s));
  }
  if (absl::Status st = CheckHistograms(m); !st.ok()) return st;
  return m;
}

}  // namespace sroute::metrics

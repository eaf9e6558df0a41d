// SPDX-License-Identifier: Apache-2.0
#include "metrics/exposition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "util/log.h"

namespace sroute::metrics {
namespace {

bool ValidName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.substr(s.size() - suffix.size()) == suffix;
}

void AppendEscaped(std::string_view value, bool label, std::string* out) {
  for (char c : value) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '"' && label) {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

void AppendValue(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "+Inf" : "-Inf");
  } else if (v == std::floor(v) && std::fabs(v) < 9.007199254740992e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    out->append(buf);
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out->append(buf);
  }
}

// name{labels[,extra]} value\n
void AppendSample(std::string_view name, const Labels& labels,
                  const std::pair<std::string, std::string>* extra,
                  double value, std::string* out) {
  out->append(name);
  if (!labels.empty() || extra != nullptr) {
    out->push_back('{');
    bool first = true;
    auto add = [&](const std::string& k, const std::string& v) {
      if (!first) out->push_back(',');
      first = false;
      out->append(k);
      out->append("=\"");
      AppendEscaped(v, /*label=*/true, out);
      out->push_back('"');
    };
    for (const auto& [k, v] : labels) add(k, v);
    if (extra != nullptr) add(extra->first, extra->second);
    out->push_back('}');
  }
  out->push_back(' ');
  AppendValue(value, out);
  out->push_back('\n');
}

std::string BoundText(double bound) {
  std::string s;
  AppendValue(bound, &s);
  return s;
}

}  // namespace

HistogramData HistogramData::Empty(std::vector<double> bounds) {
  HistogramData h;
  h.counts.assign(bounds.size() + 1, 0);
  h.upper_bounds = std::move(bounds);
  return h;
}

uint64_t HistogramData::count() const {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return n;
}

void HistogramData::Observe(double seconds, uint64_t n) {
  const auto it =
      std::lower_bound(upper_bounds.begin(), upper_bounds.end(), seconds);
  counts[static_cast<size_t>(it - upper_bounds.begin())] += n;
}

void HistogramData::Merge(const HistogramData& other) {
  for (size_t i = 0; i < counts.size() && i < other.counts.size(); ++i) {
    counts[i] += other.counts[i];
  }
  sum += other.sum;
}

const std::vector<double>& LatencyBounds() {
  static const std::vector<double> bounds = {
      0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
      0.0025,  0.005,    0.01,    0.025,  0.05,    0.1,    0.25,
      0.5,     1,        2.5,     5,      10};
  return bounds;
}

void Family::Add(Labels labels, double value) {
  AppendSample(name_, labels, nullptr, value, &samples_);
}

void Family::AddHistogram(Labels labels, const HistogramData& h) {
  uint64_t cumulative = 0;
  const std::string bucket = name_ + "_bucket";
  for (size_t i = 0; i < h.upper_bounds.size(); ++i) {
    cumulative += h.counts[i];
    const std::pair<std::string, std::string> le{"le",
                                                 BoundText(h.upper_bounds[i])};
    AppendSample(bucket, labels, &le, static_cast<double>(cumulative),
                 &samples_);
  }
  cumulative += h.counts.empty() ? 0 : h.counts.back();
  const std::pair<std::string, std::string> inf{"le", "+Inf"};
  AppendSample(bucket, labels, &inf, static_cast<double>(cumulative),
               &samples_);
  AppendSample(name_ + "_sum", labels, nullptr, h.sum, &samples_);
  AppendSample(name_ + "_count", labels, nullptr,
               static_cast<double>(cumulative), &samples_);
}

void Family::Render(std::string* out) const {
  out->append("# HELP ");
  out->append(name_);
  out->push_back(' ');
  AppendEscaped(help_, /*label=*/false, out);
  out->append("\n# TYPE ");
  out->append(name_);
  out->append(type_ == MetricType::kCounter ? " counter\n"
              : type_ == MetricType::kGauge ? " gauge\n"
                                            : " histogram\n");
  out->append(samples_);
}

Family& Exposition::Declare(std::string name, MetricType type,
                            std::string help) {
  if (auto it = by_name_.find(name); it != by_name_.end()) {
    if (it->second->type() != type) {
      LogError("metric ", name, " declared twice with different types");
      std::abort();
    }
    return *it->second;
  }
  const bool counter_named = EndsWith(name, "_total");
  if (!ValidName(name) || (type == MetricType::kCounter) != counter_named) {
    LogError("metric name ", name,
             " breaks the Prometheus conventions (counters, and only they, "
             "end in _total)");
    std::abort();
  }
  families_.emplace_back(name, type, std::move(help));
  by_name_.emplace(std::move(name), &families_.back());
  return families_.back();
}

std::string Exposition::Render() const {
  std::string out;
  for (const Family& f : families_) f.Render(&out);
  return out;
}

std::string SanitizeName(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 1);
  if (!text.empty() && text[0] >= '0' && text[0] <= '9') out.push_back('_');
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == ':';
    out.push_back(ok ? c : '_');
  }
  return out;
}

}  // namespace sroute::metrics

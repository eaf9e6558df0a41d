// SPDX-License-Identifier: Apache-2.0
// Exposition: metrics in the Prometheus text format (version 0.0.4), as
// every daemon's /metrics answers them (docs/design.md §7).
//
//   Exposition e;
//   auto& ops = e.Declare("sroute_rule_ops_total", MetricType::kCounter,
//                         "IOs a rule routed");
//   ops.Add({{"rule_id", "3"}, {"op", "read"}}, 42);
//   std::string body = e.Render();
//
// Families are rendered in the order they were first declared, each with
// its HELP and TYPE lines and then its samples in the order added, so a
// collector may add samples of several families in one pass. Names follow
// Prometheus conventions, which Declare checks: [a-zA-Z_:][a-zA-Z0-9_:]*,
// counters end in `_total`, durations are in seconds (`_seconds`). Label
// values are escaped (backslash, double quote, newline).
//
// Thread safety: none; one collector fills one Exposition.
#ifndef SROUTE_METRICS_EXPOSITION_H_
#define SROUTE_METRICS_EXPOSITION_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sroute::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

using Labels = std::vector<std::pair<std::string, std::string>>;

// A histogram's observations: counts[i] observations at most
// upper_bounds[i] seconds and above the bound before (not cumulative);
// counts has one more element, the observations above the last bound.
struct HistogramData {
  std::vector<double> upper_bounds;
  std::vector<uint64_t> counts;
  double sum = 0;  // of every observation, in seconds

  // Zero counts over `bounds`.
  static HistogramData Empty(std::vector<double> bounds);
  uint64_t count() const;
  // Adds `n` observations of `seconds` each to the first bound not below
  // `seconds`; `sum` is left to the caller (it may know it exactly).
  void Observe(double seconds, uint64_t n = 1);
  // Adds `other`'s counts and sum. REQUIRES: the same bounds.
  void Merge(const HistogramData& other);
};

// The bounds every latency histogram of sroute uses: 10 µs to 10 s.
const std::vector<double>& LatencyBounds();

class Family {
 public:
  Family(std::string name, MetricType type, std::string help)
      : name_(std::move(name)), type_(type), help_(std::move(help)) {}

  const std::string& name() const { return name_; }
  MetricType type() const { return type_; }

  // REQUIRES: type() is a counter or a gauge.
  void Add(Labels labels, double value);
  // REQUIRES: type() is a histogram.
  void AddHistogram(Labels labels, const HistogramData& h);

  void Render(std::string* out) const;

 private:
  std::string name_;
  MetricType type_;
  std::string help_;
  std::string samples_;  // rendered as added
};

class Exposition {
 public:
  // The family `name`, declared now or earlier (then `type` must match).
  // A name that breaks the conventions above is a programming error
  // (checked: it aborts), not a runtime condition.
  Family& Declare(std::string name, MetricType type, std::string help);
  std::string Render() const;

 private:
  std::deque<Family> families_;  // stable addresses
  std::map<std::string, Family*, std::less<>> by_name_;
};

// A metric name made of `text` for a key that came from elsewhere (a
// stage's counter "alice.hits" → "alice_hits"): characters outside
// [a-zA-Z0-9_:] become '_', and a leading digit gets a '_' before it.
std::string SanitizeName(std::string_view text);

// The value of the Content-Type header for Render()'s output.
inline constexpr char kContentType[] =
    "text/plain; version=0.0.4; charset=utf-8";

}  // namespace sroute::metrics

#endif  // SROUTE_METRICS_EXPOSITION_H_

// SPDX-License-Identifier: Apache-2.0
// ParseMetrics: reads the Prometheus text format (version 0.0.4) back, and
// checks what a scraper relies on: every sample belongs to a family with
// a TYPE, names and labels are well formed, no series appears twice,
// counters are not negative, and each histogram's buckets are cumulative
// and end in le="+Inf" equal to its _count. For tests and tools that read
// a daemon's /metrics.
#ifndef SROUTE_METRICS_TEXT_PARSER_H_
#define SROUTE_METRICS_TEXT_PARSER_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "metrics/exposition.h"

namespace sroute::metrics {

struct Sample {
  std::string name;  // as written: a histogram's end in _bucket/_sum/_count
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct ParsedMetrics {
  std::map<std::string, MetricType, std::less<>> types;  // by family
  std::map<std::string, std::string, std::less<>> help;
  std::vector<Sample> samples;

  // Samples named `name` whose labels include every one of `match`.
  std::vector<const Sample*> Find(
      std::string_view name,
      const std::map<std::string, std::string>& match = {}) const;
  // The sum of Find's values; nullopt if none matched.
  std::optional<double> Sum(
      std::string_view name,
      const std::map<std::string, std::string>& match = {}) const;
};

// InvalidArgument "line N: reason" for the first defect.
absl::StatusOr<ParsedMetrics> ParseMetrics(std::string_view text);

}  // namespace sroute::metrics

#endif  // SROUTE_METRICS_TEXT_PARSER_H_

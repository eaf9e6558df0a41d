// SPDX-License-Identifier: Apache-2.0
// PatternMatcher: a header pattern <SOURCE, OPS, FILE[RANGE]> (rules/rule.h)
// compiled once (its regex too) to test many IO headers.
#ifndef SROUTE_RULES_PATTERN_MATCHER_H_
#define SROUTE_RULES_PATTERN_MATCHER_H_

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "rules/io_header.h"
#include "rules/rule.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace sroute {

// A compiled header pattern: which IOs a quiesce, a drain or a tap
// (RuleTable::MatchTaps) takes.
//
// Thread safety: immutable after Create; Matches is thread-safe.
class PatternMatcher {
 public:
  // Fails on a bad regex.
  static absl::StatusOr<PatternMatcher> Create(const HeaderPattern& pattern);
  // Source, op class and file; a ranged pattern matches IOs with a byte
  // extent only where they overlap the range (and every other op).
  bool Matches(const IoHeader& h) const;
  // Whether some IO to `file` ("//HOST/PATH") may match: the file part
  // alone, whatever the source, op and range.
  bool MatchesFile(std::string_view file) const;
  const HeaderPattern& pattern() const { return pattern_; }

 private:
  HeaderPattern pattern_;
  std::shared_ptr<const re2::RE2> regex_;
};

}  // namespace sroute

#endif  // SROUTE_RULES_PATTERN_MATCHER_H_

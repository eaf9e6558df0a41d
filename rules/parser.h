// SPDX-License-Identifier: Apache-2.0
// The rule language (docs/design.md §4): parsing with precise errors, and a
// printer whose output parses back to the same rule.
#ifndef SROUTE_RULES_PARSER_H_
#define SROUTE_RULES_PARSER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/rule.h"

namespace sroute {

struct ParseError {
  int line = 0;    // 1-based
  int column = 0;  // 1-based byte column
  std::string reason;
};

struct ParsedRules {
  std::vector<Rule> rules;
  std::vector<int> lines;  // source line of each rule
  std::vector<ParseError> errors;
  bool ok() const { return errors.empty(); }
};

// Parses a rules file: one rule per line, '#' starts a comment, blank lines
// are ignored. Every malformed line yields one error; good lines still parse.
ParsedRules ParseRules(std::string_view text);

// Parses exactly one rule. The error message reads "COL: reason".
absl::StatusOr<Rule> ParseRule(std::string_view text);

// Parses a header pattern such as "<*, w, //S1/X[0:4K]>" (used by Delete,
// Quiesce and Drain).
absl::StatusOr<HeaderPattern> ParsePattern(std::string_view text);

// Canonical text. ParseRule(FormatRule(r)) == r for every valid rule.
std::string FormatRule(const Rule& rule);
std::string FormatPattern(const HeaderPattern& pattern);
std::string FormatTarget(const Target& target);
std::string FormatSize(uint64_t bytes);  // 524288 -> "512K"

}  // namespace sroute

#endif  // SROUTE_RULES_PARSER_H_

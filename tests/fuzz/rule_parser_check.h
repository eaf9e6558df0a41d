// SPDX-License-Identifier: Apache-2.0
// The invariants of the rule language that the fuzzer (rule_parser_fuzz.cc)
// and the corpus replay test (tests/unit/rules/fuzz_replay_test.cc) check on
// arbitrary input. Header-only so both can share it.
#ifndef SROUTE_TESTS_FUZZ_RULE_PARSER_CHECK_H_
#define SROUTE_TESTS_FUZZ_RULE_PARSER_CHECK_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "re2/re2.h"
#include "rules/parser.h"
#include "rules/rule.h"
#include "rules/rule_table.h"
#include "rules/validate.h"
#include "util/strings.h"

namespace sroute {
namespace fuzz_check {

// A header that `rule` matches (ignoring its byte range), or false when
// none is easy to build (a regex that does not match its own text).
inline bool HeaderFor(const Rule& rule, IoHeader* h) {
  const HeaderPattern& p = rule.pattern;
  switch (p.source.kind) {
    case SourcePattern::Kind::kAny:
      h->source = "fuzz-tenant";
      break;
    case SourcePattern::Kind::kTenant:
      h->source = p.source.name;
      break;
    case SourcePattern::Kind::kStage:
      h->source = "fuzz-tenant";
      h->stage = p.source.name;
      break;
  }
  if (p.ops & kOpClassRead) {
    h->op = Op::kRead;
  } else if (p.ops & kOpClassWrite) {
    h->op = Op::kWrite;
  } else if (p.ops & kOpClassCreate) {
    h->op = Op::kCreate;
  } else {
    h->op = Op::kUnlink;
  }
  switch (p.file.kind) {
    case FilePattern::Kind::kAny:
      h->file = "//fuzz-host/file";
      break;
    case FilePattern::Kind::kExact:
      h->file = p.file.text;
      break;
    case FilePattern::Kind::kPrefix:
      h->file = p.file.text + "x/y";
      break;
    case FilePattern::Kind::kRegex: {
      RE2 re(p.file.text, RE2::Quiet);
      if (!re.ok()) return false;
      if (RE2::FullMatch(p.file.text, re)) {
        h->file = p.file.text;
      } else if (RE2::FullMatch("", re)) {
        h->file = "";
      } else {
        return false;
      }
      break;
    }
  }
  if (p.file.range) {
    h->offset = p.file.range->start;
    // Stay inside the range and avoid offset + length overflowing.
    h->length = std::min<uint64_t>(p.file.range->end - p.file.range->start,
                                   uint64_t{1} << 40);
  } else {
    h->offset = 100;
    h->length = 4096;
  }
  return true;
}

// Checks one rule: FormatRule output re-parses to an equal rule and printing
// is a fixpoint. Returns an error description or "".
inline std::string CheckRoundTrip(const Rule& rule) {
  const std::string text = FormatRule(rule);
  absl::StatusOr<Rule> again = ParseRule(text);
  if (!again.ok()) {
    return StrCat("FormatRule output does not parse: '", text,
                  "': ", std::string(again.status().message()));
  }
  if (!(*again == rule)) {
    return StrCat("FormatRule output parses to a different rule: '", text,
                  "' -> '", FormatRule(*again), "'");
  }
  const std::string text2 = FormatRule(*again);
  if (text2 != text) {
    return StrCat("FormatRule is not a fixpoint: '", text, "' then '", text2,
                  "'");
  }
  const std::string pattern_text = FormatPattern(rule.pattern);
  absl::StatusOr<HeaderPattern> pattern = ParsePattern(pattern_text);
  if (!pattern.ok() || !(*pattern == rule.pattern)) {
    return StrCat("FormatPattern output does not round-trip: '", pattern_text,
                  "'");
  }
  return "";
}

// Every check for one fuzz input. Returns an error description or "".
inline std::string CheckRuleParserInput(std::string_view input) {
  const ParsedRules parsed = ParseRules(input);
  if (parsed.rules.size() != parsed.lines.size()) {
    return "ParseRules: rules and lines differ in size";
  }
  const std::vector<std::string_view> lines = StrSplit(input, '\n');
  int last_line = 0;
  for (int line : parsed.lines) {
    if (line <= last_line || line > static_cast<int>(lines.size())) {
      return StrCat("ParseRules: bad rule line number ", line);
    }
    last_line = line;
  }
  for (const ParseError& e : parsed.errors) {
    if (e.line < 1 || e.line > static_cast<int>(lines.size())) {
      return StrCat("ParseRules: bad error line number ", e.line);
    }
    const int len = static_cast<int>(lines[e.line - 1].size());
    if (e.column < 1 || e.column > len + 1) {
      return StrCat("ParseRules: error column ", e.column, " outside line ",
                    e.line, " of length ", len);
    }
    if (e.reason.empty()) return "ParseRules: error without a reason";
  }
  if (parsed.rules.size() + parsed.errors.size() > lines.size()) {
    return "ParseRules: more results than lines";
  }
  for (const Rule& rule : parsed.rules) {
    std::string err = CheckRoundTrip(rule);
    if (!err.empty()) return err;
    // What the parser gives is what a receiver of parsed rules accepts.
    if (absl::Status s = ValidateRule(rule); !s.ok()) {
      return StrCat("ValidateRule refuses a parsed rule '", FormatRule(rule),
                    "': ", std::string(s.message()));
    }
  }

  // A single line parses the same way through ParseRule and ParseRules.
  absl::StatusOr<Rule> single = ParseRule(input);
  if (single.ok()) {
    if (parsed.rules.size() != 1 || !(parsed.rules[0] == *single)) {
      return "ParseRule accepts a line ParseRules does not";
    }
  }

  absl::StatusOr<HeaderPattern> pattern = ParsePattern(input);
  if (pattern.ok()) {
    const std::string text = FormatPattern(*pattern);
    absl::StatusOr<HeaderPattern> again = ParsePattern(text);
    if (!again.ok() || !(*again == *pattern)) {
      return StrCat("FormatPattern output does not round-trip: '", text, "'");
    }
  }

  // Install the rules in a table: every rule's own header must be routed by
  // that rule or by one ahead of it, over every byte of the IO.
  constexpr size_t kMaxRules = 64;
  std::vector<RuleEntryPtr> entries;
  for (size_t i = 0; i < parsed.rules.size() && i < kMaxRules; ++i) {
    entries.push_back(std::make_shared<RuleEntry>(
        i + 1, OrderKey{parsed.rules[i].priority, i}, parsed.rules[i], ""));
  }
  RuleTablePtr table = RuleTable::Build(entries);
  if (table->size() != entries.size()) return "RuleTable: wrong size";
  RuleTablePtr applied = RuleTable::Empty()->Apply(entries, {}, 1);
  RuleTable::Pieces pieces;
  RuleTable::Pieces applied_pieces;
  for (const RuleEntryPtr& e : entries) {
    IoHeader h;
    if (!HeaderFor(e->rule(), &h)) continue;
    table->Match(h, &pieces);
    applied->Match(h, &applied_pieces);
    if (pieces.empty()) return "RuleTable::Match returned no pieces";
    uint64_t at = h.offset;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const RuleTable::Piece& piece = pieces[i];
      if (piece.offset != at) return "RuleTable::Match: pieces not contiguous";
      at += piece.length;
      if (piece.rule == nullptr) {
        return StrCat("RuleTable::Match: rule '", FormatRule(e->rule()),
                      "' does not route its own header ", ToString(h));
      }
      if (e->order() < piece.rule->order()) {
        return StrCat("RuleTable::Match: rule '", FormatRule(e->rule()),
                      "' lost to a later rule '",
                      FormatRule(piece.rule->rule()), "'");
      }
      if (i >= applied_pieces.size() ||
          applied_pieces[i].offset != piece.offset ||
          applied_pieces[i].length != piece.length ||
          applied_pieces[i].rule != piece.rule) {
        return "RuleTable: Build and Apply route differently";
      }
    }
    if (applied_pieces.size() != pieces.size()) {
      return "RuleTable: Build and Apply route differently";
    }
    if (at != h.offset + h.length) {
      return "RuleTable::Match: pieces do not cover the IO";
    }
    const RuleEntry* whole = table->MatchWhole(h);
    if (!e->rule().pattern.file.range &&
        (whole == nullptr || e->order() < whole->order())) {
      return StrCat("RuleTable::MatchWhole: rule '", FormatRule(e->rule()),
                    "' does not route its own header");
    }
  }
  return "";
}

}  // namespace fuzz_check
}  // namespace sroute

#endif  // SROUTE_TESTS_FUZZ_RULE_PARSER_CHECK_H_

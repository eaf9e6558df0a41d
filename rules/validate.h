// SPDX-License-Identifier: Apache-2.0
// What makes a `Rule` valid, apart from how its text is spelled: the checks
// the parser applies as it reads a line (at the line's columns) and the
// controller and hosts apply to a rule that reaches them parsed
// (proto::RuleMsg, rpc/rule_codec.h), which nobody re-parses.
//
//   absl::StatusOr<Rule> rule = RuleFromMsg(msg);    // enums in range
//   if (rule.ok()) status = ValidateRule(*rule);     // the language's rules
//
// A rule ValidateRule accepts prints (FormatRule) to text that parses back
// to the same rule, and every rule the parser returns passes ValidateRule
// (tests/fuzz/rule_msg_fuzz.cc checks both on arbitrary messages).
//
// Thread safety: plain functions of their arguments.
#ifndef SROUTE_RULES_VALIDATE_H_
#define SROUTE_RULES_VALIDATE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "rules/rule.h"

namespace sroute {

// The most an `ack=` option may say.
inline constexpr uint32_t kMaxAck = 1024;

// The rule language's character classes.
bool IsNameChar(char c);   // names of tenants, stages, delegates, hosts
bool IsPathChar(char c);   // PATH in //HOST/PATH
bool IsValueChar(char c);  // delegate arguments that need no quotes

// A fault at `offset` bytes into the text that was checked.
struct TextFault {
  size_t offset = 0;
  std::string reason;
};

// PATH after "//HOST/": every component a real name (no empty component,
// no '.' or '..'). With `prefix` the text ends where a '*' stood, so its last
// component is only the start of a name ("//S/.*" matches hidden files).
std::optional<TextFault> PathFault(std::string_view path, bool prefix);

// Why `re` cannot be a file pattern's regular expression, or "".
std::string RegexFault(std::string_view re);

// Faults that involve more than one part of a rule (a detour against the
// pattern, the delegate or the ack count). `detour` is the index of the
// detour at fault, or -1 when the fault is the ack count (or a tap).
struct RuleFault {
  int detour = -1;
  std::string reason;
};
std::optional<RuleFault> CrossPartFault(const Rule& rule);

// OK, or InvalidArgument naming the part at fault ("detour 2: ...").
absl::Status ValidateRule(const Rule& rule);

}  // namespace sroute

#endif  // SROUTE_RULES_VALIDATE_H_

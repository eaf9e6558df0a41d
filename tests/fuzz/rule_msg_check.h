// SPDX-License-Identifier: Apache-2.0
// The invariants of a rule that arrives parsed (proto::RuleMsg, read by
// RuleFromMsg and checked by ValidateRule, never parsed), which the fuzzer
// (rule_msg_fuzz.cc) and the replay test (tests/unit/rpc/) check on
// arbitrary bytes:
// - decoding never crashes;
// - a rule ValidateRule accepts prints to text that parses back to the same
//   rule (a host that restores it from its text gets the rule that was
//   checked), and travels through RuleToMsg/RuleFromMsg unchanged;
// - a rule it refuses is one the parser would not give back: ValidateRule
//   is exactly as strict as the language, not stricter.
#ifndef SROUTE_TESTS_FUZZ_RULE_MSG_CHECK_H_
#define SROUTE_TESTS_FUZZ_RULE_MSG_CHECK_H_

#include <string>
#include <string_view>

#include "proto/rule.pb.h"
#include "rpc/rule_codec.h"
#include "rules/parser.h"
#include "rules/validate.h"
#include "tests/fuzz/rule_parser_check.h"
#include "util/strings.h"

namespace sroute {
namespace fuzz_check {

// Every check for one decoded message. Returns an error description or "".
inline std::string CheckRuleMsg(const proto::RuleMsg& msg) {
  absl::StatusOr<Rule> rule = RuleFromMsg(msg);
  if (!rule.ok()) {
    if (rule.status().message().empty()) return "RuleFromMsg: no reason";
    return "";
  }
  const absl::Status valid = ValidateRule(*rule);
  const std::string text = FormatRule(*rule);
  if (!valid.ok()) {
    if (valid.message().empty()) return "ValidateRule: no reason";
    absl::StatusOr<Rule> parsed = ParseRule(text);
    if (parsed.ok() && *parsed == *rule) {
      return StrCat("ValidateRule refuses a rule the parser accepts: '", text,
                    "': ", std::string(valid.message()));
    }
    return "";
  }
  if (std::string err = CheckRoundTrip(*rule); !err.empty()) {
    return StrCat(
        "ValidateRule accepts a rule whose text does not come "
        "back: ",
        err);
  }
  proto::RuleMsg again;
  RuleToMsg(*rule, &again);
  absl::StatusOr<Rule> back = RuleFromMsg(again);
  if (!back.ok() || !(*back == *rule)) {
    return StrCat("RuleToMsg/RuleFromMsg change the rule '", text, "'");
  }
  return "";
}

// `input` as a serialized RuleMsg (bytes that are not one are skipped).
inline std::string CheckRuleMsgInput(std::string_view input) {
  proto::RuleMsg msg;
  if (!msg.ParseFromArray(input.data(), static_cast<int>(input.size()))) {
    return "";
  }
  return CheckRuleMsg(msg);
}

}  // namespace fuzz_check
}  // namespace sroute

#endif  // SROUTE_TESTS_FUZZ_RULE_MSG_CHECK_H_

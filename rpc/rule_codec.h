// SPDX-License-Identifier: Apache-2.0
// Rule <-> proto::RuleMsg: rules as they travel once the controller has read
// them (its store, the rule checker, the hosts' agents), parsed, not as text
// to be parsed again at every hop. Text (FormatRule) stays for people.
//
//   proto::ManagedRule m;
//   RuleToMsg(rule, m.mutable_rule());
//   m.set_text(FormatRule(rule));
//   ...
//   absl::StatusOr<Rule> back = RuleOf(m);  // no parsing
//
// Thread safety: plain functions of their arguments.
#ifndef SROUTE_RPC_RULE_CODEC_H_
#define SROUTE_RPC_RULE_CODEC_H_

#include "absl/status/statusor.h"
#include "proto/controller.pb.h"
#include "proto/rule.pb.h"
#include "rules/rule.h"

namespace sroute {

void RuleToMsg(const Rule& rule, proto::RuleMsg* out);

// The rule `msg` holds. Fails (InvalidArgument) on a value outside its enum
// or op mask; it does not check what only the parser checks (names, paths,
// regexes, options): a message comes from a part that parsed the rule.
absl::StatusOr<Rule> RuleFromMsg(const proto::RuleMsg& msg);

// A managed rule's parsed form: its `rule`, or, for a rule stored before
// rules travelled parsed (no `rule`), its text parsed.
absl::StatusOr<Rule> RuleOf(const proto::ManagedRule& m);

// A managed rule of `rule` (its text, its parsed form, `owner`; cid 0).
proto::ManagedRule ManagedRuleOf(const Rule& rule, const std::string& owner);

}  // namespace sroute

#endif  // SROUTE_RPC_RULE_CODEC_H_

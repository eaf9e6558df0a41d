// SPDX-License-Identifier: Apache-2.0
#include "rpc/rule_codec.h"

#include <string>
#include <utility>

#include "rules/parser.h"
#include "util/strings.h"

namespace sroute {

void RuleToMsg(const Rule& rule, proto::RuleMsg* out) {
  out->Clear();
  out->set_priority(rule.priority);
  const HeaderPattern& p = rule.pattern;
  out->set_source_kind(static_cast<uint32_t>(p.source.kind));
  out->set_source_name(p.source.name);
  out->set_ops(p.ops);
  out->set_file_kind(static_cast<uint32_t>(p.file.kind));
  out->set_file_text(p.file.text);
  if (p.file.range) {
    out->set_has_range(true);
    out->set_range_start(p.file.range->start);
    out->set_range_end(p.file.range->end);
  }
  if (rule.delegate) {
    out->set_delegate_name(rule.delegate->name);
    for (const DelegateArg& a : rule.delegate->args) {
      proto::DelegateArgMsg* m = out->add_delegate_args();
      m->set_key(a.key);
      m->set_value(a.value);
    }
  }
  for (const Detour& d : rule.detours) {
    proto::DetourMsg* m = out->add_detours();
    m->set_what(static_cast<uint32_t>(d.what));
    m->set_target_kind(static_cast<uint32_t>(d.target.kind));
    m->set_file(d.target.file);
    m->set_stage(d.target.stage);
    m->set_stage_host(d.target.stage_host);
  }
  out->set_ack(rule.ack);
}

namespace {

// `value` as enum E if it is one of its `count` values.
template <typename E>
bool ToEnum(uint32_t value, uint32_t count, E* out) {
  if (value >= count) return false;
  *out = static_cast<E>(value);
  return true;
}

absl::Status Bad(std::string_view what, uint32_t value) {
  return absl::InvalidArgumentError(
      StrCat("rule message: ", what, " ", value,
             " is not one this sroute knows (a peer of another version? "
             "send the rule as text)"));
}

}  // namespace

absl::StatusOr<Rule> RuleFromMsg(const proto::RuleMsg& msg) {
  Rule r;
  r.priority = msg.priority();
  HeaderPattern& p = r.pattern;
  if (!ToEnum(msg.source_kind(), 3, &p.source.kind)) {
    return Bad("source kind", msg.source_kind());
  }
  p.source.name = msg.source_name();
  if (msg.ops() == 0 || (msg.ops() & ~uint32_t{kAllOpClasses}) != 0) {
    return Bad("op mask", msg.ops());
  }
  p.ops = static_cast<OpClassMask>(msg.ops());
  if (!ToEnum(msg.file_kind(), 4, &p.file.kind)) {
    return Bad("file kind", msg.file_kind());
  }
  p.file.text = msg.file_text();
  if (msg.has_range()) {
    if (msg.range_end() <= msg.range_start()) {
      return absl::InvalidArgumentError("rule message: an empty byte range");
    }
    p.file.range = ByteRange{msg.range_start(), msg.range_end()};
  }
  if (!msg.delegate_name().empty()) {
    DelegateSpec d;
    d.name = msg.delegate_name();
    for (const proto::DelegateArgMsg& a : msg.delegate_args()) {
      d.args.push_back(DelegateArg{a.key(), a.value()});
    }
    r.delegate = std::move(d);
  }
  for (const proto::DetourMsg& m : msg.detours()) {
    Detour d;
    if (!ToEnum(m.what(), 3, &d.what)) return Bad("detour kind", m.what());
    if (!ToEnum(m.target_kind(), 3, &d.target.kind)) {
      return Bad("target kind", m.target_kind());
    }
    d.target.file = m.file();
    d.target.stage = m.stage();
    d.target.stage_host = m.stage_host();
    r.detours.push_back(std::move(d));
  }
  r.ack = msg.ack();
  return r;
}

absl::StatusOr<Rule> RuleOf(const proto::ManagedRule& m) {
  if (m.has_rule()) return RuleFromMsg(m.rule());
  return ParseRule(m.text());
}

proto::ManagedRule ManagedRuleOf(const Rule& rule, const std::string& owner) {
  proto::ManagedRule m;
  m.set_text(FormatRule(rule));
  m.set_owner(owner);
  RuleToMsg(rule, m.mutable_rule());
  return m;
}

}  // namespace sroute

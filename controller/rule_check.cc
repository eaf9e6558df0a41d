// SPDX-License-Identifier: Apache-2.0
// Phase zero of every update: the rule checker (check/checker.h) over the
// cluster's persisted rules and topology, with the update applied.
#include <algorithm>
#include <set>

#include "check/report_proto.h"
#include "controller/controller_impl.h"
#include "rpc/rule_codec.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

// A persisted rule as the checker reads it: ordered by cid (the store's
// order, as hosts install them), named by cid and owner.
check::TableRule TableRuleOf(const proto::ManagedRule& m, const Rule& rule) {
  check::TableRule t;
  t.rule = rule;
  t.order.priority = rule.priority;
  t.order.seq = m.cid();
  t.id = m.cid();
  t.origin = m.owner().empty() ? StrCat("cid ", m.cid())
                               : StrCat("cid ", m.cid(), " (", m.owner(), ")");
  return t;
}

// What the checker's verdicts depend on besides the rules.
std::string TopologyKey(const std::vector<check::SwitchView>& views) {
  std::string key;
  for (const check::SwitchView& v : views) {
    key += StrCat(v.name, "@", v.address, "\n");
    for (const auto& e : v.endpoints) {
      key += StrCat(" ", e.name, "=", e.kind, ":", e.address, "\n");
    }
    for (const std::string& s : v.stages) key += StrCat(" stage ", s, "\n");
  }
  return key;
}

}  // namespace

std::vector<check::SwitchView> Controller::Impl::CheckerViews(bool with_rules) {
  std::vector<check::SwitchView> views;
  std::map<std::string, std::set<std::string>> live_stages;
  {
    MutexLock l(&mu);
    // The newer of the registration's list and the last report's: an
    // update naming a configured stage must not race the first report,
    // and a stage removed since the registration must not stay.
    for (const auto& [name, s] : sessions) {
      if (!s.reported) {
        live_stages[name].insert(s.host.stages().begin(),
                                 s.host.stages().end());
        continue;
      }
      for (const proto::StageStats& st : s.stages) {
        live_stages[name].insert(st.config().name());
      }
    }
  }
  std::set<std::string> seen;
  auto add = [&](const std::string& name, const proto::HostInfo* info) {
    if (!seen.insert(name).second) return;
    check::SwitchView v;
    v.name = name;
    if (info != nullptr) v.address = info->address();
    // Every daemon lists at least its home endpoint; a host that lists none
    // (an sSwitch embedded in a program) is not checked against them.
    if (info != nullptr && info->endpoints_size() > 0) {
      v.topology_known = true;
      for (const proto::EndpointInfo& e : info->endpoints()) {
        v.endpoints.push_back({e.name(), e.kind(), e.address()});
      }
      // Not info->stages: it is the list at registration, which
      // live_stages replaces once the host reports.
      std::set<std::string> stages;
      // A store that cannot be read fails the update that follows anyway
      // (it persists there first); the view just misses those stages.
      if (auto stored = store->Stages(name); stored.ok()) {
        for (const proto::StageConfig& c : *stored) stages.insert(c.name());
      }
      stages.insert(live_stages[name].begin(), live_stages[name].end());
      v.stages.assign(stages.begin(), stages.end());
    }
    auto rules = with_rules ? store->Rules(name)
                            : absl::StatusOr<std::vector<proto::ManagedRule>>();
    if (with_rules && rules.ok()) {
      for (const proto::ManagedRule& m : *rules) {
        auto rule = RuleOf(m);
        if (rule.ok()) v.rules.push_back(TableRuleOf(m, *rule));
      }
    }
    views.push_back(std::move(v));
  };
  for (const TopologyHost& h : Topology()) add(h.info.sswitch(), &h.info);
  if (auto stored = store->SSwitches(); stored.ok()) {
    for (const std::string& name : *stored) add(name, nullptr);
  }
  return views;
}

check::Checker& Controller::Impl::CurrentChecker() {
  // The topology alone first: reading and parsing every rule is what the
  // kept checker saves.
  const std::string topology = TopologyKey(CheckerViews(/*with_rules=*/false));
  if (checker == nullptr || checker_version != store->version() ||
      checker_topology != topology) {
    checker = std::make_unique<check::Checker>(CheckerViews(true));
    checker_version = store->version();
    checker_topology = topology;
  }
  return *checker;
}

void Controller::Impl::HandleCheck(Call& call) {
  const proto::CheckAt& req = call.request().controller().check();
  absl::StatusOr<std::vector<check::TableRule>> parsed =
      check::NewRules(std::vector<std::string>(req.rules().add().begin(),
                                               req.rules().add().end()));
  if (!parsed.ok()) {
    call.ReplyStatus(parsed.status());
    return;
  }
  const std::vector<check::TableRule>& add = *parsed;
  if (!add.empty() && req.sswitch().empty()) {
    call.ReplyStatus(absl::InvalidArgumentError(
        "name the sSwitch the rules are for (--host)"));
    return;
  }
  check::Report report;
  {
    MutexLock serial(&update_mu);
    check::Checker& c = CurrentChecker();
    const check::CheckOptions options{.deep = req.rules().deep()};
    report = add.empty() ? c.CheckAll(options)
                         : c.CheckChange(req.sswitch(), add, {}, options);
  }
  if (add.empty() && !req.sswitch().empty()) {
    std::erase_if(report.findings, [&](const check::Finding& f) {
      return f.sswitch != req.sswitch();
    });
  }
  proto::ControllerReply reply;
  *reply.mutable_check() = check::ToProto(report);
  controller_internal::ReplyWith(call, std::move(reply));
}

absl::Status Controller::Impl::CheckPlan(const UpdatePlan& plan, bool force,
                                         std::string* report) {
  CurrentChecker();
  std::vector<check::Checker::Change> changes;
  for (const UpdatePlan::Change& c : plan.changes) {
    std::vector<Rule> rules;
    for (const proto::ManagedRule& m : c.insert) {
      auto rule = RuleOf(m);  // as PlanUpdate parsed it
      if (!rule.ok()) return rule.status();
      rules.push_back(*std::move(rule));
    }
    // Their cids come later, so they go after every persisted rule.
    changes.push_back({c.sswitch, check::NewRules(rules, c.sswitch), c.remove});
  }
  const check::Report r = checker->CheckChanges(changes);
  report->clear();
  if (r.findings.empty()) return absl::OkStatus();
  *report = r.Text();
  if (r.errors() > 0 && !force) {
    return absl::FailedPreconditionError(
        StrCat("the rule checker refused the update, nothing was changed ",
               "(sroutectl rules add|load --force, or UpdateSpec::force, ",
               "installs it anyway):\n", *report));
  }
  if (r.errors() > 0) {
    LogError("update installed by force despite the rule checker:\n", *report);
  }
  return absl::OkStatus();
}

void Controller::Impl::CheckerFollows(const UpdatePlan& plan,
                                      uint64_t version) {
  if (checker == nullptr) return;
  for (const UpdatePlan::Change& c : plan.changes) {
    std::vector<check::TableRule> add;
    for (const proto::ManagedRule& m : c.insert) {
      auto rule = RuleOf(m);
      if (rule.ok()) add.push_back(TableRuleOf(m, *rule));
    }
    checker->Apply(c.sswitch, add, c.remove);
  }
  checker_version = version;
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// ControllerTarget: sroute-controller, through ControllerClient. Rules are
// changed in consistent updates; a rule is named by its cid. Commands that
// act on one sSwitch act on the one --host names, or on the only one
// registered.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "controller/client.h"
#include "proto/controller.pb.h"
#include "rpc/handshake.h"
#include "tools/sroutectl/format.h"
#include "tools/sroutectl/json_output.h"
#include "tools/sroutectl/target.h"
#include "util/strings.h"

namespace sroute::ctl {
namespace {

// The rules of a listing as `rules ls --json` prints them.
proto::CtlRules RulesOf(const proto::RuleList& list) {
  proto::CtlRules rules;
  for (const proto::AdminRule& a : list.rules()) {
    *rules.add_rules() = CtlRuleOf(a);
  }
  return rules;
}

// Rules as a table; `with_owner` for the managed-rule listing (stats show
// counters only).
std::string RulesTable(const proto::RuleList& list, bool with_owner) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"CID", "SSWITCH"});
  if (with_owner) rows.back().push_back("OWNER");
  for (const char* h :
       {"READS", "WRITES", "OTHERS", "READ_BYTES", "WRITE_BYTES", "IN_FLIGHT",
        "ERRORS", "P50_US", "P99_US", "RULE"}) {
    rows.back().push_back(h);
  }
  for (const proto::AdminRule& a : list.rules()) {
    rows.push_back({std::to_string(a.rule().cid()), a.sswitch()});
    if (with_owner) rows.back().push_back(a.rule().owner());
    for (uint64_t n :
         {a.reads(), a.writes(), a.others(), a.read_bytes(), a.write_bytes()}) {
      rows.back().push_back(std::to_string(n));
    }
    rows.back().push_back(std::to_string(a.in_flight()));
    for (uint64_t n : {a.errors(), a.p50_us(), a.p99_us()}) {
      rows.back().push_back(std::to_string(n));
    }
    // Counters of a rule the host made itself (its rules file, a
    // delegate) come without its text: the controller does not manage it.
    rows.back().push_back(a.rule().cid() == 0 && a.rule().text().empty()
                              ? "(a rule of the host's own)"
                              : a.rule().text());
  }
  return Table(rows);
}

std::string SecondsAgo(int64_t ms) {
  return Printf("%.1fs ago", static_cast<double>(ms) / 1e3);
}

std::string HostsTable(const proto::CtlHosts& hosts) {
  std::vector<std::vector<std::string>> rows = {
      {"SSWITCH", "ROLE", "ADDRESS", "STATE", "VERSION", "RULES", "ENDPOINTS"}};
  for (const proto::CtlHost& h : hosts.hosts()) {
    std::string endpoints;
    for (const proto::CtlEndpoint& e : h.endpoints()) {
      endpoints += (endpoints.empty() ? "" : " ") + e.name() + "=" +
                   e.address() + "/" + e.kind();
    }
    std::string state =
        !h.has_last_seen_ms_ago()
            ? "disconnected, not seen since the controller started"
            : std::string(h.connected() ? "connected" : "disconnected") +
                  ", seen " + SecondsAgo(h.last_seen_ms_ago());
    rows.push_back({h.sswitch(), h.role(),
                    h.address().empty() ? "-" : h.address(), std::move(state),
                    std::to_string(h.version()), std::to_string(h.rules()),
                    std::move(endpoints)});
  }
  return Table(rows);
}

proto::CtlHosts HostsOf(const proto::HostList& list) {
  proto::CtlHosts hosts;
  for (const proto::HostStatus& h : list.hosts()) {
    *hosts.add_hosts() = CtlHostOf(h);
  }
  return hosts;
}

// `stats`: every host's state, then the latest interval's counters.
Report StatsReport(const proto::HostList& hosts, const proto::RuleList& rules) {
  proto::CtlClusterStats json;
  *json.mutable_hosts() = HostsOf(hosts).hosts();
  *json.mutable_rules() = RulesOf(rules).rules();
  std::vector<std::vector<std::string>> rows = {
      {"SSWITCH", "STATE", "VERSION"}};
  for (const proto::HostStatus& h : hosts.hosts()) {
    rows.push_back({h.host().sswitch(),
                    h.connected() ? "connected" : "disconnected",
                    std::to_string(h.version())});
  }
  return Report{.text = Table(rows) + "\n" +
                        (rules.rules_size() == 0
                             ? "no rule saw IO in the last interval\n"
                             : RulesTable(rules, /*with_owner=*/false)),
                .json = ToJson(json)};
}

class ControllerTarget : public ControlTarget {
 public:
  ControllerTarget(std::string address, std::string secret_file,
                   std::string sswitch)
      : address_(std::move(address)),
        secret_file_(std::move(secret_file)),
        sswitch_(std::move(sswitch)) {}

  absl::StatusOr<Report> ListRules() override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    std::string sswitch;  // every sSwitch's without --host
    if (!sswitch_.empty()) {
      auto s = SSwitch();
      if (!s.ok()) return s.status();
      sswitch = *s;
    }
    auto rules = client_->ListRules(sswitch);
    if (!rules.ok()) return Classify(rules.status());
    return Report{.text = RulesTable(*rules, /*with_owner=*/true),
                  .json = ToJson(RulesOf(*rules))};
  }

  // In one consistent update.
  absl::StatusOr<std::vector<uint64_t>> AddRules(const std::vector<Rule>& rules,
                                                 const std::string& owner,
                                                 bool force) override {
    auto sswitch = SSwitch();
    if (!sswitch.ok()) return sswitch.status();
    UpdateSpec spec;
    spec.changes.push_back(
        RuleChanges{*sswitch, {rules.begin(), rules.end()}, {}});
    spec.owner = owner;
    spec.force = force;
    auto r = client_->Update(spec);
    if (!r.ok()) return Classify(r.status());
    if (!r->report.empty()) std::cerr << r->report;
    return r->cids;
  }

  absl::StatusOr<proto::CheckResult> CheckRules(
      const std::vector<std::string>& add, bool deep) override {
    std::string sswitch = sswitch_;
    if (!add.empty()) {
      auto s = SSwitch();
      if (!s.ok()) return s.status();
      sswitch = *s;
    } else if (absl::Status s = Connect(); !s.ok()) {
      return s;
    }
    auto r = client_->CheckRules(sswitch, add, deep);
    if (!r.ok()) return Classify(r.status());
    return *r;
  }

  // By cid, wherever they are, in one consistent update.
  absl::Status RemoveRules(const std::vector<std::string>& args) override {
    std::vector<uint64_t> cids;
    for (const std::string& a : args) {
      uint64_t cid = 0;
      if (!ParseId(a, &cid)) {
        return absl::InvalidArgumentError(
            "'" + a + "' is not a rule's cid (see sroutectl rules ls)");
      }
      cids.push_back(cid);
    }
    if (absl::Status s = Connect(); !s.ok()) return s;
    auto rules = client_->ListRules("");
    if (!rules.ok()) return Classify(rules.status());
    UpdateSpec spec;
    for (uint64_t cid : cids) {
      auto rule = std::find_if(
          rules->rules().begin(), rules->rules().end(),
          [&](const proto::AdminRule& a) { return a.rule().cid() == cid; });
      if (rule == rules->rules().end()) {
        return absl::NotFoundError("no rule with cid " + std::to_string(cid) +
                                   " at the controller; nothing removed");
      }
      auto change = std::find_if(
          spec.changes.begin(), spec.changes.end(),
          [&](const RuleChanges& c) { return c.sswitch == rule->sswitch(); });
      if (change == spec.changes.end()) {
        spec.changes.push_back(RuleChanges{rule->sswitch(), {}, {}});
        change = spec.changes.end() - 1;
      }
      change->remove.push_back(cid);
    }
    auto r = client_->Update(spec);
    return r.ok() ? absl::OkStatus() : Classify(r.status());
  }

  absl::StatusOr<Report> Stats() override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    auto hosts = client_->ListHosts();
    if (!hosts.ok()) return Classify(hosts.status());
    auto rules = client_->IntervalStats();
    if (!rules.ok()) return Classify(rules.status());
    return StatsReport(*hosts, *rules);
  }

  absl::Status Quiesce(const std::string& pattern, bool on) override {
    auto sswitch = SSwitch();
    if (!sswitch.ok()) return sswitch.status();
    absl::Status s = client_->Quiesce(*sswitch, pattern, on);
    return s.ok() ? s : Classify(s);
  }

  absl::Status Drain(const std::string& pattern,
                     absl::Duration timeout) override {
    auto sswitch = SSwitch();
    if (!sswitch.ok()) return sswitch.status();
    absl::Status s = client_->Drain(*sswitch, pattern, timeout);
    return s.ok() ? s : Classify(s);
  }

  absl::StatusOr<Report> Fences(const std::vector<std::string>&) override {
    return absl::InvalidArgumentError(
        "fences are a host's own: give --host, not --controller");
  }

  absl::StatusOr<Report> SlowOps(int64_t, bool) override {
    return absl::InvalidArgumentError(
        "slow IOs are kept by each host: give --host, not --controller");
  }

  absl::StatusOr<proto::ProfileProgress> ProfileStep(
      const proto::ProfileEndpoint& request) override {
    auto sswitch = SSwitch();
    if (!sswitch.ok()) return sswitch.status();
    auto r = client_->ProfileStep(*sswitch, request);
    if (!r.ok()) return Classify(r.status());
    return r;
  }

  absl::StatusOr<std::vector<proto::DeviceProfile>> SetProfiles(
      const proto::SetProfiles& request) override {
    auto sswitch = SSwitch();
    if (!sswitch.ok()) return sswitch.status();
    auto r = client_->SetProfiles(*sswitch, request);
    if (!r.ok()) return Classify(r.status());
    return r;
  }

  absl::StatusOr<Report> Traces(uint64_t) override {
    return absl::InvalidArgumentError(
        "traces are kept by the host that sampled them: give --host, not "
        "--controller");
  }

  absl::StatusOr<Report> Records(const std::string&) override {
    return absl::InvalidArgumentError(
        "records live on storage servers: give --host HOST:PORT, not "
        "--controller");
  }

  absl::StatusOr<Report> WearStatus() override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    auto status = client_->GetAppState("wear_level", "status");
    if (absl::IsNotFound(status.status())) {
      return absl::NotFoundError(
          "no wear_level state: is the controller running --app wear_level?");
    }
    if (!status.ok()) return Classify(status.status());
    proto::Stages list;
    list.set_action(proto::Stages::LIST);
    auto lists = client_->StagesAt("", list);
    if (!lists.ok()) return Classify(lists.status());
    Report report;
    report.text = StrCat("wear_level: ", *status, "\n");
    proto::CtlWearStatus json;
    json.set_status(Utf8Text(*status));
    for (const proto::HostStages& h : lists->hosts()) {
      const std::map<std::string, int64_t> gauges(h.gauges().begin(),
                                                  h.gauges().end());
      const std::vector<EndpointWear> wear = WearOf(gauges);
      if (wear.empty()) continue;
      const double variance = WearVariance(wear);
      StrAppend(&report.text, h.sswitch(),
                ": variance of the mean erase "
                "counts ",
                absl::StrFormat("%.3f", variance), "\n");
      proto::CtlWearHost* host = json.add_hosts();
      host->set_sswitch(Utf8Text(h.sswitch()));
      host->set_variance(variance);
      for (const EndpointWear& w : wear) {
        StrAppend(&report.text, "  ", w.name, "  mean ",
                  absl::StrFormat("%.3f", w.erase_mean), "  erases ", w.erases,
                  "\n");
        proto::CtlWearEndpoint* ep = host->add_endpoints();
        ep->set_name(w.name);
        ep->set_erase_mean(w.erase_mean);
        ep->set_erases(w.erases);
      }
    }
    report.json = ToJson(json);
    return report;
  }

  absl::StatusOr<Report> Apps(proto::Apps::Action action,
                              const std::string& name, const std::string& args,
                              bool detail) override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    proto::Apps req;
    req.set_action(action);
    req.set_name(name);
    req.set_args(args);
    auto list = client_->Apps(req);
    if (!list.ok()) return Classify(list.status());
    Report report;
    const proto::AppInfo* found = nullptr;
    if (!detail) report.text = "NAME  STATE  RULES  ARGS\n";
    for (const proto::AppInfo& a : list->apps()) {
      if (detail && a.name() != name) continue;
      found = &a;
      std::vector<std::string> cids;
      for (uint64_t c : a.rule_cids()) cids.push_back(StrCat(c));
      const std::string rules = cids.empty() ? "-" : absl::StrJoin(cids, ",");
      const std::string how =
          a.from_command_line() ? " (--app: runs at every start)" : "";
      if (detail) {
        StrAppend(&report.text, "name: ", a.name(), "\nstate: ", a.state(), how,
                  "\nargs: ", a.args(), "\nrules: ", rules, "\ndecisions:\n");
        for (const std::string& d : a.decisions()) {
          StrAppend(&report.text, "  ", d, "\n");
        }
      } else {
        StrAppend(&report.text, a.name(), "  ", a.state(), "  ", rules, "  ",
                  a.args().empty() ? "-" : a.args(), "\n");
      }
    }
    if (detail && found == nullptr) {
      return absl::NotFoundError(StrCat("no app ", name, " runs"));
    }
    if (!detail) {
      std::vector<std::string> names(list->available().begin(),
                                     list->available().end());
      StrAppend(&report.text, "available: ", absl::StrJoin(names, ", "), "\n");
    }
    // Their own messages: no text in them is bytes.
    report.json = detail ? ToJson(*found) : ToJson(*list);
    return report;
  }

  absl::StatusOr<Report> CallApp(
      const std::string& app, const std::string& command,
      const std::vector<std::string>& args) override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    proto::AppCall req;
    req.set_app(app);
    req.set_command(command);
    for (const std::string& a : args) req.add_args(a);
    auto answer = client_->CallApp(req);
    if (!answer.ok()) return Classify(answer.status());
    Report report;
    report.text = answer->text();
    if (!report.text.empty() && report.text.back() != '\n') {
      report.text += "\n";
    }
    report.json = answer->json().empty() ? "{}\n" : answer->json() + "\n";
    return report;
  }

  absl::StatusOr<Report> OffloadStatus() override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    // The app's state: "flows" (a line a flow: phase, sSwitch, flow rule,
    // home server, target servers and their folders (comma-separated),
    // off-load rule, home rule, since,
    // the home server's long-run demand)
    // and "decisions" (a line each, oldest first).
    auto flows = client_->GetAppState("tail_latency", "flows");
    auto decisions = client_->GetAppState("tail_latency", "decisions");
    if (absl::IsNotFound(flows.status()) &&
        absl::IsNotFound(decisions.status())) {
      // No state yet: fine if the app runs (it has decided nothing).
      proto::Apps req;
      req.set_action(proto::Apps::LIST);
      auto list = client_->Apps(req);
      if (!list.ok()) return Classify(list.status());
      if (std::none_of(list->apps().begin(), list->apps().end(),
                       [](const proto::AppInfo& a) {
                         return a.name() == "tail_latency";
                       })) {
        return absl::NotFoundError(
            "no tail_latency state and the app does not run: start it with "
            "`apps start tail_latency` or the controller's --app "
            "tail_latency");
      }
    }
    for (const auto* st : {&flows, &decisions}) {
      if (!st->ok() && !absl::IsNotFound(st->status())) {
        return Classify(st->status());
      }
    }
    Report report;
    proto::CtlOffloadStatus json;
    report.text = "FLOWS\n";
    if (flows.ok()) {
      for (std::string_view line : StrSplit(*flows, '\n')) {
        std::vector<std::string> f;
        for (std::string_view x : StrSplit(line, '\t')) f.emplace_back(x);
        if (f.size() < 9) continue;
        StrAppend(&report.text, "  ", f[0], "  ", f[1], "  ", f[2], "  ", f[3],
                  " -> ", f[4], "  (", f[5], ")\n");
        proto::CtlOffloadFlow* flow = json.add_flows();
        flow->set_phase(Utf8Text(f[0]));
        flow->set_sswitch(Utf8Text(f[1]));
        flow->set_flow(Utf8Text(f[2]));
        flow->set_home(Utf8Text(f[3]));
        for (std::string_view x : StrSplit(f[4], ',')) {
          if (!x.empty()) flow->add_targets(Utf8Text(x));
        }
        for (std::string_view x : StrSplit(f[5], ',')) {
          if (!x.empty()) flow->add_folders(Utf8Text(x));
        }
        flow->set_since_unix_s(std::strtoll(f[8].c_str(), nullptr, 10));
      }
    }
    report.text += "RULES\n";
    for (const TopologyHost& h : client_->Topology()) {
      auto rules = client_->Rules(h.info.sswitch());
      if (!rules.ok()) continue;
      for (const proto::ManagedRule& r : *rules) {
        if (r.owner() != "tail_latency") continue;
        StrAppend(&report.text, "  ", r.cid(), "  ", h.info.sswitch(), "  ",
                  r.text(), "\n");
        proto::CtlAppRule* rule = json.add_rules();
        rule->set_cid(r.cid());
        rule->set_sswitch(Utf8Text(h.info.sswitch()));
        rule->set_rule(Utf8Text(r.text()));
      }
    }
    report.text += "DECISIONS\n";
    if (decisions.ok()) {
      for (std::string_view line : StrSplit(*decisions, '\n')) {
        if (line.empty()) continue;
        StrAppend(&report.text, "  ", line, "\n");
        json.add_decisions(Utf8Text(line));
      }
    }
    report.json = ToJson(json);
    return report;
  }

  absl::StatusOr<Report> CacheCurves(const std::string& tenant) override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    std::vector<std::string> tenants;
    if (!tenant.empty()) {
      tenants.push_back(tenant);
    } else {
      auto list = client_->GetAppState("cache_sizing", "tenants");
      if (absl::IsNotFound(list.status())) {
        return absl::NotFoundError(
            "no curves yet: is the controller running --app cache_sizing, "
            "for one interval at least?");
      }
      if (!list.ok()) return Classify(list.status());
      for (std::string_view t : StrSplit(*list, '\n')) {
        if (!t.empty()) tenants.emplace_back(t);
      }
    }
    Report report;
    proto::CtlCacheCurves json;
    for (const std::string& t : tenants) {
      auto text = client_->GetAppState("cache_sizing", "mrc/" + t);
      if (absl::IsNotFound(text.status())) {
        return absl::NotFoundError("no curve for tenant " + t);
      }
      if (!text.ok()) return Classify(text.status());
      report.text += *text;
      // "# tenant T references N block B", then "SIZE MISS" lines.
      proto::CtlCacheCurve* curve = json.add_curves();
      curve->set_tenant(Utf8Text(t));
      for (std::string_view line : StrSplit(*text, '\n')) {
        if (line.empty()) continue;
        std::vector<std::string> f;
        for (std::string_view x : StrSplit(line, ' ')) f.emplace_back(x);
        if (line[0] == '#') {
          for (size_t i = 1; i + 1 < f.size(); ++i) {
            const uint64_t n = std::strtoull(f[i + 1].c_str(), nullptr, 10);
            if (f[i] == "references") curve->set_references(n);
            if (f[i] == "block") curve->set_block(n);
          }
        } else if (f.size() == 2) {
          proto::CtlCurvePoint* p = curve->add_points();
          p->set_size_bytes(std::strtoull(f[0].c_str(), nullptr, 10));
          p->set_miss_ratio(std::strtod(f[1].c_str(), nullptr));
        }
      }
    }
    report.json = ToJson(json);
    return report;
  }

  absl::StatusOr<proto::StageLists> StageStates(
      const proto::Stages& request) override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    std::string sswitch = sswitch_;
    if (sswitch.empty() && request.action() != proto::Stages::LIST) {
      auto only = SSwitch();
      if (!only.ok()) return only.status();
      sswitch = *only;
    }
    auto lists = client_->StagesAt(sswitch, request);
    if (!lists.ok()) return Classify(lists.status());
    return lists;
  }

  absl::StatusOr<Report> Stages(const proto::Stages& request) override {
    auto lists = StageStates(request);
    if (!lists.ok()) return lists.status();
    Report report;
    proto::CtlStages json;
    for (const proto::HostStages& h : lists->hosts()) {
      report.text += StagesText(h.stages(), h.sswitch());
      proto::CtlHostStages* host = json.add_hosts();
      host->set_sswitch(Utf8Text(h.sswitch()));
      *host->mutable_stages() = h.stages();
    }
    report.json = ToJson(json);
    return report;
  }

  absl::StatusOr<Report> Controllers() override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    auto m = client_->ListControllers();
    if (!m.ok()) return Classify(m.status());
    std::vector<std::vector<std::string>> members = {
        {"CONTROLLER", "ADDRESS", "ROLE"}};
    for (const proto::ControllerMember& c : m->members()) {
      members.push_back(
          {c.id(), c.address(), c.leader() ? "leader" : "follower"});
    }
    std::vector<std::vector<std::string>> store = {
        {"STORE MEMBER", "HEALTH", "RAFT", "VERSION", "SIZE"}};
    for (const proto::StoreMember& sm : m->store_members()) {
      store.push_back(
          {sm.endpoint(), sm.healthy() ? "healthy" : "unhealthy: " + sm.error(),
           sm.leader() ? "leader" : (sm.version().empty() ? "-" : "follower"),
           sm.version().empty() ? "-" : sm.version(),
           sm.db_size() > 0 ? std::to_string(sm.db_size()) : "-"});
    }
    std::string leader = "none (an election is under way)";
    for (const proto::ControllerMember& c : m->members()) {
      if (c.leader()) leader = c.address();
    }
    return Report{.text = "store " + m->store() + "\nleader " + leader +
                          "\n\n" + Table(members) + "\n" + Table(store),
                  .json = ToJson(*m)};
  }

  absl::StatusOr<Report> Hosts() override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    auto hosts = client_->ListHosts();
    if (!hosts.ok()) return Classify(hosts.status());
    const proto::CtlHosts json = HostsOf(*hosts);
    return Report{.text = HostsTable(json), .json = ToJson(json)};
  }

 private:
  absl::Status Classify(const absl::Status& s) const {
    return ClassifyControllerError(s, address_);
  }

  // Connects to the controller, once.
  absl::Status Connect() {
    if (client_ != nullptr) return absl::OkStatus();
    // The owner of the rules it installs by default.
    auto c = ConnectController(address_, secret_file_, "sroutectl");
    if (!c.ok()) return c.status();
    client_ = *std::move(c);
    return absl::OkStatus();
  }

  // Connects; then the sSwitch a command acts on: the one --host names,
  // which must be registered at the controller, or the only one registered
  // without --host (so a one-host cluster needs none).
  absl::StatusOr<std::string> SSwitch() {
    if (absl::Status s = Connect(); !s.ok()) return s;
    auto hosts = client_->ListHosts();
    if (!hosts.ok()) return Classify(hosts.status());
    std::vector<std::string> names;
    for (const proto::HostStatus& h : hosts->hosts()) {
      names.push_back(h.host().sswitch());
    }
    if (!sswitch_.empty()) {
      if (std::find(names.begin(), names.end(), sswitch_) == names.end()) {
        return absl::NotFoundError(
            "no sSwitch '" + sswitch_ +
            "' is registered at the controller (see sroutectl hosts)");
      }
      return sswitch_;
    }
    if (names.size() == 1) return names[0];
    if (names.empty()) {
      return absl::NotFoundError("no host is registered at the controller");
    }
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
    return absl::InvalidArgumentError(std::to_string(names.size()) +
                                      " sSwitches are registered (" + list +
                                      "): name one with --host SSWITCH");
  }

  const std::string address_;
  const std::string secret_file_;
  const std::string sswitch_;  // --host
  std::unique_ptr<ControllerClient> client_;
};

}  // namespace

absl::Status ClassifyControllerError(const absl::Status& s,
                                     const std::string& address) {
  if (s.ok()) return s;
  // Not reached only for the RPC channel's own errors (no connection,
  // connection lost, no reply in time), which name the controller's
  // address; the controller's answers never do.
  const bool unreachable =
      (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) ||
       absl::IsCancelled(s)) &&
      s.message().find(address) != absl::string_view::npos;
  return unreachable ? NotReached(s) : Refused(s);
}

absl::StatusOr<std::unique_ptr<ControllerClient>> ConnectController(
    const std::string& address, const std::string& secret_file,
    const std::string& name) {
  if (secret_file.empty()) {
    return absl::InvalidArgumentError(
        "the controller needs the cluster secret: give --secret-file FILE");
  }
  auto secret = LoadSecretFile(secret_file);
  if (!secret.ok()) return Refused(secret.status());
  ControllerClient::Options o;
  o.address = address;
  o.secret = *std::move(secret);
  o.name = name;
  auto c = ControllerClient::Connect(std::move(o));
  if (!c.ok()) return ClassifyControllerError(c.status(), address);
  return c;
}

std::unique_ptr<ControlTarget> MakeControllerTarget(std::string address,
                                                    std::string secret_file,
                                                    std::string sswitch) {
  return std::make_unique<ControllerTarget>(
      std::move(address), std::move(secret_file), std::move(sswitch));
}

}  // namespace sroute::ctl

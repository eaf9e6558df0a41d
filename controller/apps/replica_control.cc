// SPDX-License-Identifier: Apache-2.0
#include "controller/apps/replica_control.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "rules/parser.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr char kKind[] = "replica_set";
// How long a host may take to park the stage and let its reads finish.
constexpr uint32_t kStageChangeMs = 5000;
// Between tries to switch a host that did not answer, while writes wait.
constexpr absl::Duration kRetry = absl::Milliseconds(500);

}  // namespace

absl::StatusOr<ReplicaControlOptions> ParseReplicaControlArgs(
    const std::string& args) {
  ReplicaControlOptions o;
  for (std::string_view kv : StrSplit(args, ',')) {
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          StrCat("replica_control: expected key=value, not '", kv, "'"));
    }
    const std::string_view key = kv.substr(0, eq);
    const std::string value(kv.substr(eq + 1));
    if (key == "flows") {
      for (std::string_view f : StrSplit(value, '+')) {
        if (f.empty()) continue;
        const std::string_view path =
            f.back() == '*' ? f.substr(0, f.size() - 1) : f;
        if (!f.starts_with("//") || path.find('*') != std::string_view::npos ||
            path.find_first_of(" ,<>[]\"") != std::string_view::npos) {
          return absl::InvalidArgumentError(
              StrCat("replica_control: flows: '", f,
                     "' is not a file //HOST/PATH or a prefix //HOST/PATH*"));
        }
        o.flows.emplace_back(f);
      }
    } else if (key == "stage") {
      o.stage = value;
    } else if (key == "spread") {
      if (value != "least_loaded" && value != "random" && value != "weighted" &&
          value != "hedged") {
        return absl::InvalidArgumentError(
            StrCat("replica_control: spread: least_loaded, random, weighted "
                   "or hedged, not '",
                   value, "'"));
      }
      o.spread = value;
    } else if (key == "idle" || key == "priority") {
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < (key == "idle" ? 1 : 0) ||
          n > 1000000) {
        return absl::InvalidArgumentError(
            StrCat("replica_control: ", key, ": expected ",
                   key == "idle" ? "seconds, at least 1" : "a priority",
                   ", not '", value, "'"));
      }
      if (key == "idle") {
        o.idle = absl::Seconds(n);
      } else {
        o.priority = static_cast<int32_t>(n);
      }
    } else {
      return absl::InvalidArgumentError(
          StrCat("replica_control: unknown argument '", key,
                 "' (flows, stage, spread, idle, priority)"));
    }
  }
  if (o.flows.empty()) {
    return absl::InvalidArgumentError(
        "replica_control: flows: at least one file or prefix is required");
  }
  if (o.stage.empty()) {
    return absl::InvalidArgumentError("replica_control: stage: a name");
  }
  return o;
}

ReplicaControl::ReplicaControl(ReplicaControlOptions options)
    : options_(std::move(options)) {
  MutexLock l(&mu_);
  for (const std::string& f : options_.flows) {
    Flow flow;
    flow.file = f;
    flows_.push_back(std::move(flow));
  }
}

absl::Status ReplicaControl::Start(ControllerApi& api) {
  api_.store(&api, std::memory_order_release);
  std::string flows;
  for (const std::string& f : options_.flows) {
    StrAppend(&flows, flows.empty() ? "" : " ", f);
  }
  LogInfo("replica_control: flows ", flows, " of stage ", options_.stage,
          ": reads spread (", options_.spread, ") after ",
          absl::FormatDuration(options_.idle), " without writes");
  return absl::OkStatus();
}

bool ReplicaControl::Covers(const Flow& f, const std::string& file) const {
  if (!f.file.empty() && f.file.back() == '*') {
    return file.starts_with(
        std::string_view(f.file).substr(0, f.file.size() - 1));
  }
  return file == f.file;
}

void ReplicaControl::OnIoTurn(const HeaderEvent& event,
                              std::function<void()> go) {
  size_t post = SIZE_MAX;
  bool held = false;
  {
    MutexLock l(&mu_);
    for (size_t i = 0; i < flows_.size(); ++i) {
      Flow& f = flows_[i];
      if (!Covers(f, event.header.file)) continue;
      if (f.mode == Mode::kPrimary) break;
      // Reads may be spread somewhere: this write waits for them to go
      // back to the primary.
      f.held.push_back(std::move(go));
      held = true;
      // Before Start, the first stats (which find the hosts) send every
      // flow to the primary and let its held writes go.
      if (!f.to_primary_posted && api() != nullptr) {
        f.to_primary_posted = true;
        post = i;
      }
      break;
    }
  }
  if (post != SIZE_MAX) {
    const std::string reason =
        StrCat("a write to ", event.header.file, " from ", event.sswitch);
    api()->Post([this, post, reason] { ToPrimary(post, reason); });
  }
  if (!held) go();
}

std::string ReplicaControl::Rule(const std::string& source,
                                 const std::string& file,
                                 const std::string& target) const {
  const std::string text = StrCat("@", options_.priority, " <", source, ", w, ",
                                  file, "> -> <IO, ", target, ">");
  // As the store keeps it (canonical), so that it can be found there.
  auto rule = ParseRule(text);
  return rule.ok() ? FormatRule(*rule) : text;
}

absl::Status ReplicaControl::SetStageFlow(const std::string& sswitch,
                                          const std::string& file,
                                          const std::string& read) {
  proto::Stages list;
  list.set_action(proto::Stages::LIST);
  auto stages = api()->Stages(sswitch, list);
  if (!stages.ok()) return stages.status();
  for (const proto::StageStats& st : *stages) {
    if (st.config().name() != options_.stage) continue;
    proto::StageConfig config = st.config();
    auto* flows = config.mutable_replica_set()->mutable_flow();
    // The app's entry comes first (the first flow that matches wins).
    proto::ReplicaSetOptions::Flow mine;
    mine.set_file(file);
    mine.set_read(read);
    std::vector<proto::ReplicaSetOptions::Flow> kept{mine};
    for (const auto& f : *flows) {
      if (f.file() != file) kept.push_back(f);
    }
    flows->Clear();
    for (auto& f : kept) *flows->Add() = std::move(f);
    proto::Stages set;
    set.set_action(proto::Stages::SET);
    *set.mutable_stage() = std::move(config);
    set.set_timeout_ms(kStageChangeMs);
    return api()->Stages(sswitch, set).status();
  }
  return absl::NotFoundError(
      StrCat("no stage ", options_.stage, " on ", sswitch));
}

absl::Status ReplicaControl::InstallRules(size_t i, bool spread) {
  std::string file;
  {
    MutexLock l(&mu_);
    file = flows_[i].file;
  }
  const std::string stage = StrCat("stage:", options_.stage);
  const std::string counting_rule = Rule("*", file, stage);
  const std::string detour_rule = Rule("*", file, "controller");
  const std::string& mode_rule = spread ? detour_rule : counting_rule;
  const std::string hand_back = Rule("stage:controller", file, stage);
  UpdateSpec spec;
  for (const std::string& host : hosts_) {
    auto rules = api()->Rules(host);
    if (!rules.ok()) return rules.status();
    RuleChanges c{host, {}, {}};
    bool have_hand_back = false, have_mode = false;
    for (const proto::ManagedRule& r : *rules) {
      if (r.owner() != "replica_control") continue;
      if (r.text() == hand_back) {
        have_hand_back = true;
      } else if (r.text() == mode_rule && !have_mode) {
        have_mode = true;
      } else if (r.text() == counting_rule || r.text() == detour_rule) {
        c.remove.push_back(r.cid());
      }
    }
    if (!have_hand_back) c.insert.push_back(hand_back);
    if (!have_mode) c.insert.push_back(mode_rule);
    if (!c.insert.empty() || !c.remove.empty()) {
      spec.changes.push_back(std::move(c));
    }
  }
  std::map<std::string, uint64_t> counting;
  if (!spec.changes.empty()) {
    spec.owner = "replica_control";
    auto out = api()->Update(spec);
    if (!out.ok()) return out.status();
  }
  if (!spread) {
    // The cids of the mode rules, whose write counters OnStats reads.
    for (const std::string& host : hosts_) {
      auto rules = api()->Rules(host);
      if (!rules.ok()) return rules.status();
      for (const proto::ManagedRule& r : *rules) {
        if (r.owner() == "replica_control" && r.text() == mode_rule) {
          counting[host] = r.cid();
        }
      }
    }
  }
  MutexLock l(&mu_);
  flows_[i].counting = std::move(counting);
  return absl::OkStatus();
}

void ReplicaControl::ToPrimary(size_t i, const std::string& reason) {
  std::string file;
  {
    MutexLock l(&mu_);
    file = flows_[i].file;
    flows_[i].to_primary_posted = false;
  }
  // Every host's reads of the flow go to the primary before any held write
  // goes on (each stage change waits for the reads under way).
  for (const std::string& host : hosts_) {
    if (absl::Status s = SetStageFlow(host, file, "primary"); !s.ok()) {
      LogWarning("replica_control: flow ", file, ": reads on ", host,
                 " could not go back to the primary (", s.message(),
                 "); its writes wait; trying again");
      bool post = false;
      {
        MutexLock l(&mu_);
        post = !flows_[i].to_primary_posted;
        flows_[i].to_primary_posted = true;
      }
      if (post) {
        api()->Post([this, i, reason] {
          absl::SleepFor(kRetry);
          ToPrimary(i, reason);
        });
      }
      return;
    }
  }
  std::vector<std::function<void()>> held;
  {
    MutexLock l(&mu_);
    Flow& f = flows_[i];
    f.mode = Mode::kPrimary;
    f.quiet_since = api()->Now();
    held.swap(f.held);
  }
  LogInfo("replica_control: flow ", file, ": reads from the primary on ",
          hosts_.size(), " host(s) (", reason, "); ", held.size(),
          " write(s) go on");
  for (auto& go : held) go();
  // The writes let go above end, so the update's drain of the flow's
  // writes ends too.
  absl::Status s = InstallRules(i, /*spread=*/false);
  MutexLock l(&mu_);
  flows_[i].rules_pending = !s.ok();
  if (!s.ok()) {
    LogWarning("replica_control: flow ", file,
               ": removing the write detours: ", s.message(),
               " (writes still ask the controller; trying again)");
  }
}

void ReplicaControl::ToSpread(size_t i) {
  std::string file;
  {
    MutexLock l(&mu_);
    file = flows_[i].file;
  }
  // Writes first: once the update is everywhere, every write of the flow
  // asks the controller, and none is under way.
  if (absl::Status s = InstallRules(i, /*spread=*/true); !s.ok()) {
    LogWarning("replica_control: flow ", file,
               ": detouring writes to spread reads: ", s.message());
    MutexLock l(&mu_);
    flows_[i].quiet_since = api()->Now();
    return;
  }
  {
    MutexLock l(&mu_);
    flows_[i].mode = Mode::kSpreading;
  }
  for (const std::string& host : hosts_) {
    if (absl::Status s = SetStageFlow(host, file, options_.spread); !s.ok()) {
      LogWarning("replica_control: flow ", file, ": spreading reads on ", host,
                 ": ", s.message());
      ToPrimary(i, "spreading failed");
      return;
    }
  }
  MutexLock l(&mu_);
  Flow& f = flows_[i];
  // A write that came meanwhile has its ToPrimary posted already.
  if (f.mode == Mode::kSpreading) f.mode = Mode::kSpread;
  LogInfo("replica_control: flow ", file, ": no write for ",
          absl::FormatDuration(options_.idle), "; reads spread (",
          options_.spread, ") on ", hosts_.size(), " host(s)");
}

void ReplicaControl::OnStats(const StatsSnapshot& stats) {
  std::set<std::string> hosts;
  for (const HostStats& h : stats.hosts) {
    if (!h.connected) continue;
    for (const proto::StageStats& st : h.stages) {
      if (st.config().name() == options_.stage && st.config().kind() == kKind) {
        hosts.insert(h.sswitch);
      }
    }
  }
  size_t n;
  {
    MutexLock l(&mu_);
    n = flows_.size();
  }
  if (hosts != hosts_) {
    std::string names;
    for (const std::string& h : hosts) StrAppend(&names, " ", h);
    LogInfo("replica_control: hosts with stage ", options_.stage, ":",
            names.empty() ? " none" : names);
    hosts_ = std::move(hosts);
    // A host that came (or came back) may spread reads or write without
    // the detour: every flow starts over from the primary.
    for (size_t i = 0; i < n; ++i) ToPrimary(i, "the hosts changed");
    return;
  }
  if (hosts_.empty()) return;
  const absl::Time now = api()->Now();
  for (size_t i = 0; i < n; ++i) {
    bool spread_now = false, retry_rules = false;
    {
      MutexLock l(&mu_);
      Flow& f = flows_[i];
      if (f.mode != Mode::kPrimary) continue;
      for (const HostStats& h : stats.hosts) {
        auto c = f.counting.find(h.sswitch);
        if (c == f.counting.end()) continue;
        for (const RuleStats& r : h.rules) {
          if (r.cid == c->second && (r.writes > 0 || r.in_flight > 0)) {
            f.quiet_since = now;
          }
        }
      }
      retry_rules = f.rules_pending;
      spread_now = !retry_rules && now - f.quiet_since >= options_.idle;
    }
    if (retry_rules) {
      absl::Status s = InstallRules(i, /*spread=*/false);
      MutexLock l(&mu_);
      flows_[i].rules_pending = !s.ok();
    } else if (spread_now) {
      ToSpread(i);
    }
  }
}

namespace {

ControlAppRegistration replica_control_app(
    "replica_control",
    [](const std::string& args) -> absl::StatusOr<std::unique_ptr<ControlApp>> {
      auto o = ParseReplicaControlArgs(args);
      if (!o.ok()) return o.status();
      return std::make_unique<ReplicaControl>(*std::move(o));
    });

}  // namespace
}  // namespace sroute

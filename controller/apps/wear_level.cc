// SPDX-License-Identifier: Apache-2.0
#include "controller/apps/wear_level.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <utility>

#include "rpc/rule_codec.h"
#include "rules/parser.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr std::string_view kSwapFolder = ".sroute-wl-";
constexpr uint32_t kCopyStepMs = 2000;  // a copy step's budget at the host
constexpr absl::Duration kDrain = absl::Seconds(10);

// "//ep/PATH" -> its data folder ("//ep/" or "//ep/.sroute-wl-N/") and the
// rest of PATH.
std::pair<std::string, std::string> DataFolder(const std::string& file) {
  const size_t slash = file.find('/', 2);
  if (slash == std::string::npos) return {file + "/", ""};
  const std::string path = file.substr(slash + 1);
  if (path.starts_with(kSwapFolder)) {
    const size_t end = path.find('/');
    if (end != std::string::npos) {
      return {file.substr(0, slash + 1 + end + 1), path.substr(end + 1)};
    }
  }
  return {file.substr(0, slash + 1), path};
}

}  // namespace

absl::StatusOr<WearLevelOptions> ParseWearLevelArgs(const std::string& args) {
  WearLevelOptions o;
  for (std::string_view kv : StrSplit(args, ',')) {
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          StrCat("wear_level: expected key=value, not '", kv, "'"));
    }
    const std::string_view key = kv.substr(0, eq);
    const std::string value(kv.substr(eq + 1));
    if (key == "variance") {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(v > 0)) {
        return absl::InvalidArgumentError(StrCat(
            "wear_level: variance: a number above 0, not '", value, "'"));
      }
      o.variance = v;
    } else if (key == "rate") {
      uint64_t n = 0;
      if (!ParseByteSize(value, &n) || n == 0) {
        return absl::InvalidArgumentError(
            StrCat("wear_level: rate: bytes per second (e.g. 16M), not '",
                   value, "'"));
      }
      o.rate_bytes_per_s = n;
    } else if (key == "cooldown") {
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 0 || n > 1'000'000) {
        return absl::InvalidArgumentError(
            StrCat("wear_level: cooldown: seconds, not '", value, "'"));
      }
      o.cooldown = absl::Seconds(n);
    } else if (key == "hosts") {
      for (std::string_view h : StrSplit(value, '+')) {
        if (!h.empty()) o.hosts.emplace_back(h);
      }
    } else {
      return absl::InvalidArgumentError(
          StrCat("wear_level: unknown argument '", key,
                 "' (variance, rate, cooldown, hosts)"));
    }
  }
  return o;
}

Rule RetargetRule(const Rule& rule,
                  const std::map<std::string, std::string>& folders) {
  Rule out = rule;
  for (Detour& d : out.detours) {
    if (d.target.kind != Target::Kind::kFile) continue;
    auto [folder, rest] = DataFolder(d.target.file);
    auto it = folders.find(folder);
    if (it != folders.end()) d.target.file = it->second + rest;
  }
  return out;
}

std::vector<std::string> DataFoldersOn(const Rule& rule,
                                       const std::string& endpoint) {
  std::vector<std::string> out;
  for (const Detour& d : rule.detours) {
    if (d.target.kind != Target::Kind::kFile) continue;
    if (EndpointOf(d.target.file) != endpoint) continue;
    std::string folder = DataFolder(d.target.file).first;
    if (std::find(out.begin(), out.end(), folder) == out.end()) {
      out.push_back(std::move(folder));
    }
  }
  return out;
}

WearLevel::WearLevel(WearLevelOptions options) : options_(std::move(options)) {}

absl::Status WearLevel::Start(ControllerApi& api) {
  api_ = &api;
  auto g = api.GetState("generation");
  if (g.ok()) generation_ = std::strtoull(g->c_str(), nullptr, 10);
  LogInfo(
      "wear_level: a host's flash endpoints are levelled when the "
      "variance of their mean erase counts passes ",
      options_.variance, " (copies at ", FormatSize(options_.rate_bytes_per_s),
      "/s, a swap per host at most every ",
      absl::FormatDuration(options_.cooldown), ")");
  Status("idle");
  return absl::OkStatus();
}

void WearLevel::Status(const std::string& text) {
  if (absl::Status s = api_->PutState("status", text); !s.ok()) {
    LogWarning("wear_level: keeping the status: ", s.message());
  }
}

void WearLevel::OnStats(const StatsSnapshot& stats) {
  if (api_ == nullptr) return;
  const absl::Time now = api_->Now();
  for (const HostStats& h : stats.hosts) {
    if (!h.connected) continue;
    if (!options_.hosts.empty() &&
        std::find(options_.hosts.begin(), options_.hosts.end(), h.sswitch) ==
            options_.hosts.end()) {
      continue;
    }
    const std::vector<EndpointWear> wear = WearOf(h.gauges);
    if (wear.size() < 2) continue;
    // Erases since the last report: which endpoint holds the hot data now.
    std::map<std::string, uint64_t>& seen = erases_seen_[h.sswitch];
    std::map<std::string, uint64_t> lately;
    bool known = true;
    for (const EndpointWear& w : wear) {
      auto it = seen.find(w.name);
      if (it == seen.end() || w.erases < it->second) {
        known = false;
      } else {
        lately[w.name] = w.erases - it->second;
      }
      seen[w.name] = w.erases;
    }
    if (!known) continue;
    const double variance = WearVariance(wear);
    if (variance < options_.variance) continue;
    auto last = last_swap_.find(h.sswitch);
    if (last != last_swap_.end() && now - last->second < options_.cooldown) {
      continue;
    }
    auto by_mean = [](const EndpointWear& a, const EndpointWear& b) {
      return a.erase_mean < b.erase_mean;
    };
    const EndpointWear& hot =
        *std::max_element(wear.begin(), wear.end(), by_mean);
    const EndpointWear& cold =
        *std::min_element(wear.begin(), wear.end(), by_mean);
    if (lately[hot.name] <= lately[cold.name]) continue;  // levels itself
    last_swap_[h.sswitch] = now;
    LogInfo("wear_level: ", h.sswitch, ": variance of the mean erase counts ",
            variance, " >= ", options_.variance, "; ", hot.name, " (mean ",
            hot.erase_mean, ", ", lately[hot.name],
            " erases lately) swaps its data with ", cold.name, " (mean ",
            cold.erase_mean, ", ", lately[cold.name], ")");
    absl::Status s = Swap(h.sswitch, hot.name, cold.name);
    if (s.ok()) {
      LogInfo("wear_level: ", h.sswitch, ": ", hot.name, " and ", cold.name,
              " swapped");
      Status(StrCat("swapped ", h.sswitch, " ", hot.name, " <-> ", cold.name));
    } else {
      LogWarning("wear_level: ", h.sswitch, ": swap of ", hot.name, " and ",
                 cold.name, " failed, nothing changed: ", s.message());
      Status(StrCat("failed ", h.sswitch, " ", hot.name, " <-> ", cold.name,
                    ": ", s.message()));
    }
  }
}

absl::Status WearLevel::CopyInSteps(const std::string& sswitch,
                                    const std::string& from,
                                    const std::string& to, bool sync,
                                    uint64_t total, uint64_t* done) {
  proto::Copy req;
  req.set_mode(sync ? proto::Copy::SYNC : proto::Copy::COPY);
  req.set_from(from);
  req.set_to(to);
  req.set_budget_ms(kCopyStepMs);
  if (!sync) req.set_rate_bytes_per_s(options_.rate_bytes_per_s);
  for (;;) {
    auto p = api_->Copy(sswitch, req);
    if (!p.ok()) return p.status();
    *done += p->bytes();
    Status(StrCat(sync ? "syncing " : "copying ", sswitch, " ", from, " -> ",
                  to, ": ", FormatSize(*done), " of ", FormatSize(total)));
    if (p->done()) return absl::OkStatus();
    req.set_after(p->after());
  }
}

absl::Status WearLevel::Swap(const std::string& sswitch, const std::string& hot,
                             const std::string& cold) {
  auto rules = api_->Rules(sswitch);
  if (!rules.ok()) return rules.status();
  // The rules to move, and the data folders of each endpoint.
  std::vector<std::pair<proto::ManagedRule, Rule>> moved;
  std::map<std::string, std::string> folders;  // old -> new
  std::vector<std::pair<std::string, std::string>> copies;
  for (const proto::ManagedRule& m : *rules) {
    auto rule = RuleOf(m);
    if (!rule.ok()) continue;
    std::vector<std::string> on_hot = DataFoldersOn(*rule, hot);
    std::vector<std::string> on_cold = DataFoldersOn(*rule, cold);
    if (on_hot.empty() && on_cold.empty()) continue;
    if (rule->delegate.has_value()) {
      return absl::FailedPreconditionError(
          StrCat("rule ", m.cid(), " (", m.text(), ") has a delegate"));
    }
    for (auto [list, to] : {std::pair{&on_hot, &cold}, {&on_cold, &hot}}) {
      for (const std::string& f : *list) {
        if (folders.count(f) != 0) continue;
        ++generation_;
        folders[f] = StrCat("//", *to, "/", kSwapFolder, generation_, "/");
        copies.emplace_back(f, folders[f]);
      }
    }
    moved.emplace_back(m, *std::move(rule));
  }
  if (moved.empty()) {
    return absl::FailedPreconditionError(
        StrCat("no managed rule sends IO to ", hot, " or ", cold));
  }
  if (absl::Status s = api_->PutState("generation", StrCat(generation_));
      !s.ok()) {
    return s;
  }
  // How much there is, for the progress.
  uint64_t total = 0;
  for (const auto& [from, to] : copies) {
    proto::Copy count;
    count.set_mode(proto::Copy::COUNT);
    count.set_from(from);
    auto p = api_->Copy(sswitch, count);
    if (!p.ok()) return p.status();
    total += p->bytes();
  }
  // What this swap made goes if it fails before the update.
  auto undo = [&](absl::Status why) {
    for (const auto& [from, to] : copies) {
      proto::Copy rm;
      rm.set_mode(proto::Copy::REMOVE);
      rm.set_from(to);
      if (auto p = api_->Copy(sswitch, rm); !p.ok()) {
        LogWarning("wear_level: ", sswitch, ": removing ", to, ": ",
                   p.status().message());
      }
    }
    return why;
  };
  uint64_t done = 0;
  for (const auto& [from, to] : copies) {
    LogInfo("wear_level: ", sswitch, ": copying ", from, " to ", to);
    if (absl::Status s = CopyInSteps(sswitch, from, to, false, total, &done);
        !s.ok()) {
      return undo(s);
    }
  }
  // Park the flows and let their IOs end; then the copies catch up.
  std::vector<std::string> patterns;
  for (const auto& [m, rule] : moved) {
    const std::string p = FormatPattern(rule.pattern);
    if (std::find(patterns.begin(), patterns.end(), p) == patterns.end()) {
      patterns.push_back(p);
    }
  }
  auto release = [&] {
    for (const std::string& p : patterns) {
      absl::Status s = api_->Quiesce(sswitch, p, false);
      // The update's own parking of the same flows may have released them.
      if (!s.ok() && !absl::IsNotFound(s)) {
        LogWarning("wear_level: ", sswitch, ": releasing ", p, ": ",
                   s.message());
      }
    }
  };
  for (const std::string& p : patterns) {
    absl::Status s = api_->Quiesce(sswitch, p, true);
    if (s.ok()) s = api_->Drain(sswitch, p, kDrain);
    if (!s.ok()) {
      release();
      return undo(s);
    }
  }
  uint64_t synced = 0;
  for (const auto& [from, to] : copies) {
    if (absl::Status s = CopyInSteps(sswitch, from, to, true, total, &synced);
        !s.ok()) {
      release();
      return undo(s);
    }
  }
  UpdateSpec spec;
  RuleChanges changes{sswitch, {}, {}};
  std::string owner;
  for (const auto& [m, rule] : moved) {
    changes.remove.push_back(m.cid());
    changes.insert.push_back(RetargetRule(rule, folders));
    owner = owner.empty() || owner == m.owner() ? m.owner() : "wear_level";
  }
  spec.changes.push_back(std::move(changes));
  spec.owner = owner.empty() ? "wear_level" : owner;
  auto out = api_->Update(spec);
  release();
  if (!out.ok()) return undo(out.status());
  LogInfo("wear_level: ", sswitch, ": ", moved.size(),
          " rule(s) now send IO to the swapped data (version ", out->version,
          "); removing the old copies");
  for (const auto& [from, to] : copies) {
    proto::Copy rm;
    rm.set_mode(proto::Copy::REMOVE);
    rm.set_from(from);
    if (auto p = api_->Copy(sswitch, rm); !p.ok()) {
      LogWarning("wear_level: ", sswitch, ": removing the old data ", from,
                 ": ", p.status().message(), " (it is no longer read)");
    }
  }
  return absl::OkStatus();
}

namespace {

ControlAppRegistration wear_level_app(
    "wear_level",
    [](const std::string& args) -> absl::StatusOr<std::unique_ptr<ControlApp>> {
      auto o = ParseWearLevelArgs(args);
      if (!o.ok()) return o.status();
      return std::make_unique<WearLevel>(*std::move(o));
    });

}  // namespace
}  // namespace sroute

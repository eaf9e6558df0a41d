// SPDX-License-Identifier: Apache-2.0
#include "controller/apps/steering.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/time/clock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr char kSteeringApp[] = "steering";
// Weights are shares in ten-thousandths.
constexpr double kWeightScale = 10'000;

std::string SteeringJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

int64_t CounterOf(const proto::StageStats& s, const std::string& name) {
  auto it = s.counters().find(name);
  return it == s.counters().end() ? -1 : it->second;
}

}  // namespace

absl::StatusOr<SteeringAppOptions> ParseSteeringArgs(const std::string& args) {
  SteeringAppOptions o;
  for (std::string_view kv : StrSplit(args, ',')) {
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    const std::string_view key = kv.substr(0, eq);
    const std::string value(eq == std::string_view::npos ? ""
                                                         : kv.substr(eq + 1));
    char* end = nullptr;
    const double x = std::strtod(value.c_str(), &end);
    const bool number = !value.empty() && *end == '\0';
    if (key == "epoch_ms" && number && x >= 10 && x <= 60'000) {
      o.epoch_ms = static_cast<uint32_t>(x);
    } else if (key == "target_us" && number && x > 0) {
      o.target_us = x;
    } else if (key == "percentile" && ParsePercentile(value).ok()) {
      o.percentile = *ParsePercentile(value);
    } else if (key == "move" && number && x > 0 && x <= 1) {
      o.move = x;
    } else if (key == "threshold_percent" && number && x >= 1 && x <= 1000) {
      o.threshold_percent = static_cast<uint32_t>(x);
    } else if (key == "max_baseline_percent" && number && x >= 100 &&
               x <= 10'000) {
      o.max_baseline_percent = static_cast<uint32_t>(x);
    } else {
      return absl::InvalidArgumentError(
          StrCat("steering: '", kv,
                 "' is not one of epoch_ms=10..60000, target_us=N, "
                 "percentile=p50|p90|p99, move=0..1, "
                 "threshold_percent=1..1000, "
                 "max_baseline_percent=100..10000"));
    }
  }
  return o;
}

std::vector<MemberPlan> PlanReplicaSet(
    const std::string& policy, const std::vector<std::string>& members,
    const std::vector<std::shared_ptr<const Profile>>& profiles,
    double read_iops, double change_iops, const SteeringAppOptions& options,
    bool* fallback, const std::vector<double>& capacity_share) {
  *fallback = false;
  const size_t n = members.size();
  std::vector<MemberPlan> plan(n);
  // A member with a share of its capacity (congested: its AIMD multiplier)
  // is planned as a smaller device: rates times the share, latency at its
  // load over the share.
  auto share_of = [&](size_t i) {
    return i < capacity_share.size() ? std::clamp(capacity_share[i], 0.01, 1.0)
                                     : 1.0;
  };
  auto peak_of = [&](size_t i, double mix) {
    return profiles[i]->PeakIops(mix) * share_of(i);
  };
  auto latency_of = [&](size_t i, double load, double mix) {
    return profiles[i]->LatencyUs(load / share_of(i), mix, options.percentile);
  };
  for (size_t i = 0; i < n; ++i) plan[i].member = members[i];
  if (n == 0) return plan;
  // Every member takes every change: its load is its reads and all writes.
  // Latency is looked up at the set's mix (the mix of an even split), not
  // each member's own: a member's mix rises as its reads fall, and with
  // write shares rounded up to the mixes measured its latency would jump
  // as load left it, and stop the search.
  const double all = read_iops / static_cast<double>(n) + change_iops;
  const double set_mix = all > 0 ? change_iops / all : 0;
  auto by_peak = [&] {
    double total = 0;
    for (size_t i = 0; i < n; ++i) total += peak_of(i, set_mix);
    for (size_t i = 0; i < n; ++i) {
      plan[i].share = total > 0 ? peak_of(i, set_mix) / total
                                : 1.0 / static_cast<double>(n);
    }
  };
  if (policy == "reflex") {
    by_peak();
  } else {
    double peak = 0;
    for (size_t i = 0; i < n; ++i) peak += peak_of(i, set_mix);
    if (read_iops + static_cast<double>(n) * change_iops >= 0.95 * peak) {
      *fallback = true;
      by_peak();
    } else if (read_iops <= 0) {
      // Nothing to weigh: what each serves within the target.
      double total = 0;
      std::vector<double> cap(n);
      for (size_t i = 0; i < n; ++i) {
        cap[i] = std::max(0.0, profiles[i]->Capacity(0, options.target_us,
                                                     options.percentile) *
                                       share_of(i) -
                                   change_iops);
        total += cap[i];
      }
      for (size_t i = 0; i < n; ++i) {
        plan[i].share = total > 0 ? cap[i] / total : 1.0 / n;
      }
    } else {
      std::vector<std::function<double(double)>> latency;
      std::vector<double> peaks;
      for (size_t i = 0; i < n; ++i) {
        peaks.push_back(peak_of(i, set_mix));
        latency.push_back([&latency_of, i, set_mix, change_iops](double reads) {
          return latency_of(i, reads + change_iops, set_mix);
        });
      }
      double worst = 0;
      uint32_t steps = 0;
      const std::vector<double> load =
          BalanceLoad(latency, read_iops, peaks, 0.01, 100'000, &worst, &steps);
      for (size_t i = 0; i < n; ++i) plan[i].share = load[i] / read_iops;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const double reads = plan[i].share * read_iops;
    plan[i].expected_us = latency_of(i, reads + change_iops, set_mix);
  }
  return plan;
}

SteeringApp::SteeringApp(SteeringAppOptions options) : options_(options) {}

absl::Status SteeringApp::Start(ControllerApi& api) {
  api_ = &api;
  if (auto saved = api.GetState("profiles"); saved.ok()) {
    proto::SetProfiles all;
    if (!all.ParseFromString(*saved)) {
      return absl::DataLossError("steering: the stored profiles are corrupt");
    }
    for (const proto::DeviceProfile& p : all.profile()) {
      auto made = Profile::Make(p);
      if (!made.ok()) {
        LogWarning("steering: stored profile of ", p.member(),
                   " is not usable: ", made.status().message());
        continue;
      }
      profiles_[p.member()] = p;
      parsed_[p.member()] = std::make_shared<const Profile>(*std::move(made));
    }
  }
  api.AddTimer(absl::Milliseconds(options_.epoch_ms), [this] { Epoch(); });
  return absl::OkStatus();
}

absl::Status SteeringApp::PushWatch(const proto::DeviceProfile& p) {
  proto::SetProfiles set;
  *set.add_profile() = p;
  set.set_threshold_percent(options_.threshold_percent);
  set.set_max_baseline_percent(options_.max_baseline_percent);
  return api_->SetProfiles(p.sswitch(), set).status();
}

void SteeringApp::OnStats(const StatsSnapshot& stats) {
  // The steered stages, as the hosts last reported them.
  std::map<StageKey, StageState> next;
  for (const HostStats& h : stats.hosts) {
    for (const proto::StageStats& s : h.stages) {
      const proto::StageConfig& c = s.config();
      if (c.kind() != "replica_set" || c.replica_set().steer().empty()) {
        continue;
      }
      const StageKey key{h.sswitch, c.name()};
      auto it = stages_.find(key);
      StageState st = it == stages_.end() ? StageState() : it->second;
      st.config = c;
      next[key] = std::move(st);
    }
  }
  stages_ = std::move(next);
  // Watches a host lost (it restarted) are set again.
  for (const auto& [member, p] : profiles_) {
    const HostStats* h = stats.Host(p.sswitch());
    if (h == nullptr || !h->connected) continue;
    if (h->gauges.count(StrCat("steer.", p.endpoint(), ".congested")) > 0) {
      continue;
    }
    if (absl::Status s = PushWatch(p); !s.ok()) {
      LogWarning("steering: cannot set ", member, "'s watch on ", p.sswitch(),
                 ": ", s.message());
    }
  }
}

void SteeringApp::Epoch() {
  const absl::Time start = absl::Now();
  // One listing per host with steered stages.
  std::map<std::string, std::vector<proto::StageStats>> listed;
  for (auto& [key, st] : stages_) {
    if (listed.count(key.first) == 0) {
      proto::Stages list;
      list.set_action(proto::Stages::LIST);
      auto got = api_->Stages(key.first, list);
      listed[key.first] = got.ok() ? *got : std::vector<proto::StageStats>();
    }
    for (const proto::StageStats& s : listed[key.first]) {
      if (s.config().name() == key.second) SteerStage(key, st, s);
    }
  }
  last_epoch_cost_ = absl::Now() - start;
}

void SteeringApp::SteerStage(const StageKey& key, StageState& st,
                             const proto::StageStats& now) {
  st.config = now.config();
  const proto::ReplicaSetOptions& o = st.config.replica_set();
  const absl::Time at = api_->Now();
  // Demand since the last epoch.
  const int64_t changes = CounterOf(now, "changes");
  int64_t reads_delta = 0;
  std::map<std::string, int64_t> reads;
  for (const std::string& m : o.member()) {
    reads[m] = std::max<int64_t>(0, CounterOf(now, "member." + m + ".reads"));
    auto before = st.reads.find(m);
    if (before != st.reads.end()) {
      reads_delta += std::max<int64_t>(0, reads[m] - before->second);
    }
  }
  const double dt = absl::ToDoubleSeconds(at - st.at);
  if (st.changes >= 0 && dt > 0) {
    st.read_iops = static_cast<double>(reads_delta) / dt;
    st.change_iops = static_cast<double>(changes - st.changes) / dt;
  }
  st.reads = std::move(reads);
  st.changes = changes;
  st.at = at;
  const std::string& policy = o.steer();
  const bool anywhere = o.placement() == "anywhere";
  if (policy != "sandook" && policy != "reflex" &&
      !(anywhere && policy == "swan")) {
    st.note = StrCat(policy, ": nothing to compute");
    return;
  }
  std::vector<std::string> members(o.member().begin(), o.member().end());
  std::vector<std::shared_ptr<const Profile>> profiles;
  for (const std::string& m : members) {
    auto it = parsed_.find(m);
    if (it == parsed_.end()) {
      st.note = StrCat("no profile for member ", m, " (profile store)");
      return;
    }
    profiles.push_back(it->second);
  }
  st.note.clear();
  // Beyond Sandook: a member its host marks congested (GC) is planned with
  // the share of its capacity its AIMD multiplier gives it, and the others
  // are weighed among themselves; its weight is the share over the
  // multiplier, since the stage multiplies again (what it reads is then
  // the plan's, and rises as the multiplier recovers between epochs).
  std::vector<double> aimd(members.size(), 1.0);
  if (policy == "sandook") {
    for (size_t i = 0; i < members.size(); ++i) {
      const int64_t permille =
          CounterOf(now, "member." + members[i] + ".aimd_permille");
      if (permille > 0) aimd[i] = std::min(1.0, permille / 1000.0);
    }
  }
  std::vector<uint32_t> weights, write_weights;
  std::vector<std::string> window;
  if (anywhere) {
    // Segregated (Sandook §7.1): the write-mode window, sliding by one
    // member every epoch, sized by the profiles; reads over the others.
    std::vector<SteeringDevice> devices;
    for (size_t i = 0; i < members.size(); ++i) {
      devices.push_back({members[i], profiles[i],
                         CounterOf(now, "member." + members[i] + ".in") != 0,
                         aimd[i]});
    }
    SteeringOptions so;
    so.k = o.copies() == 0 ? 2 : o.copies();
    so.target_us = options_.target_us;
    so.percentile = options_.percentile;
    const SteeringPlan plan =
        PlanSteering(devices, st.read_iops, st.change_iops, st.epoch++, so);
    st.fallback = plan.fallback;
    st.plan.clear();
    for (size_t i = 0; i < members.size(); ++i) {
      const bool even = policy == "swan";
      const double read_share = plan.read_share[i];
      st.plan.push_back({members[i], read_share, 0});
      weights.push_back(static_cast<uint32_t>(std::max(
          1.0,
          std::round((even ? 0.5 : read_share / aimd[i]) * kWeightScale))));
      if (plan.write_mode[i]) {
        window.push_back(members[i]);
        write_weights.push_back(static_cast<uint32_t>(std::max(
            1.0,
            std::round((even ? 0.5 : plan.write_share[i]) * kWeightScale))));
      }
    }
    for (size_t i = 0; i < members.size(); ++i) {
      st.plan[i].expected_us =
          plan.write_mode[i] ? plan.write_latency_us : plan.read_latency_us;
      st.plan[i].write_mode = plan.write_mode[i];
    }
  } else {
    st.plan = PlanReplicaSet(policy, members, profiles, st.read_iops,
                             st.change_iops, options_, &st.fallback, aimd);
    for (size_t i = 0; i < st.plan.size(); ++i) {
      weights.push_back(static_cast<uint32_t>(std::max(
          1.0, std::round(st.plan[i].share / aimd[i] * kWeightScale))));
    }
  }
  // Pushed when a share moved by `move` or more, or the window moved.
  bool push = o.weight_size() != static_cast<int>(members.size()) ||
              std::vector<std::string>(o.write_member().begin(),
                                       o.write_member().end()) != window;
  for (size_t i = 0; i < members.size() && !push; ++i) {
    push = std::abs(static_cast<double>(weights[i]) -
                    static_cast<double>(o.weight(static_cast<int>(i)))) >=
           options_.move * kWeightScale;
  }
  if (!push) return;
  proto::Stages set;
  set.set_action(proto::Stages::SET);
  *set.mutable_stage() = st.config;
  proto::ReplicaSetOptions* rs = set.mutable_stage()->mutable_replica_set();
  rs->clear_weight();
  for (uint32_t w : weights) rs->add_weight(w);
  if (anywhere) {
    rs->clear_write_member();
    rs->clear_write_weight();
    for (const std::string& m : window) rs->add_write_member(m);
    for (uint32_t w : write_weights) rs->add_write_weight(w);
  }
  auto done = api_->Stages(key.first, set);
  if (!done.ok()) {
    st.note = StrCat("weights not set: ", done.status().message());
    return;
  }
  if (anywhere) {
    // Before any window every member takes writes.
    std::vector<std::string> before(o.write_member().begin(),
                                    o.write_member().end());
    if (before.empty()) before = members;
    SwitchModes(members, before, window);
  }
  st.config = set.stage();
}

void SteeringApp::SwitchModes(const std::vector<std::string>& members,
                              const std::vector<std::string>& before,
                              const std::vector<std::string>& after) {
  auto in = [](const std::vector<std::string>& v, const std::string& m) {
    return std::find(v.begin(), v.end(), m) != v.end();
  };
  std::map<std::string, proto::SetProfiles> per_host;
  for (const std::string& m : members) {
    if (in(before, m) == in(after, m)) continue;
    auto p = profiles_.find(m);
    if (p == profiles_.end()) continue;
    per_host[p->second.sswitch()].add_mode_switched(p->second.endpoint());
  }
  for (const auto& [host, request] : per_host) {
    // Best effort: a host that misses it judges the next windows on the
    // mixed queue (the hysteresis still needs two of them).
    if (absl::Status s = api_->SetProfiles(host, request).status(); !s.ok()) {
      LogWarning("steering: mode switches not told to ", host, ": ",
                 s.message());
    }
  }
}

absl::Status SteeringApp::SaveProfiles() {
  proto::SetProfiles all;
  for (const auto& [member, p] : profiles_) *all.add_profile() = p;
  return api_->PutState("profiles", all.SerializeAsString());
}

absl::StatusOr<proto::AppAnswer> SteeringApp::PutProfile(
    const proto::AppCall& call) {
  if (call.args_size() != 4) {
    return absl::InvalidArgumentError(
        "profile-put MEMBER SSWITCH ENDPOINT PROFILE (protobuf text)");
  }
  proto::DeviceProfile p;
  if (!google::protobuf::TextFormat::ParseFromString(call.args(3), &p)) {
    return absl::InvalidArgumentError(
        "the profile is not a DeviceProfile in protobuf text format");
  }
  p.set_member(call.args(0));
  p.set_sswitch(call.args(1));
  p.set_endpoint(call.args(2));
  auto made = Profile::Make(p);
  if (!made.ok()) return made.status();
  // Its host watches the device with it (a host that does not answer now
  // gets it when its stats show it lacks it).
  absl::Status watch = PushWatch(p);
  profiles_[p.member()] = p;
  parsed_[p.member()] = std::make_shared<const Profile>(*std::move(made));
  if (absl::Status s = SaveProfiles(); !s.ok()) return s;
  proto::AppAnswer a;
  a.set_text(StrCat(
      "profile of ", p.member(), " stored (device ", p.endpoint(), " of ",
      p.sswitch(), ")",
      watch.ok() ? "" : StrCat("; its watch is not set yet: ", watch.message()),
      "\n"));
  return a;
}

absl::StatusOr<proto::AppAnswer> SteeringApp::RemoveProfile(
    const proto::AppCall& call) {
  if (call.args_size() != 1) {
    return absl::InvalidArgumentError("profile-rm MEMBER");
  }
  auto it = profiles_.find(call.args(0));
  if (it == profiles_.end()) {
    return absl::NotFoundError(StrCat("no profile of ", call.args(0)));
  }
  proto::SetProfiles clear;
  clear.add_clear(it->second.endpoint());
  (void)api_->SetProfiles(it->second.sswitch(), clear);
  profiles_.erase(it);
  parsed_.erase(call.args(0));
  if (absl::Status s = SaveProfiles(); !s.ok()) return s;
  proto::AppAnswer a;
  a.set_text(StrCat("profile of ", call.args(0), " removed\n"));
  return a;
}

proto::AppAnswer SteeringApp::ListProfiles() const {
  proto::SetProfiles all;
  std::string text;
  for (const auto& [member, p] : profiles_) {
    *all.add_profile() = p;
    const Profile& parsed = *parsed_.at(member);
    StrAppend(&text, member, "  ", p.sswitch(), "/", p.endpoint(),
              "  peak(10% writes) ", std::llround(parsed.PeakIops(0.1)),
              "  within ", options_.target_us, " us ",
              std::llround(parsed.Capacity(0.1, options_.target_us,
                                           options_.percentile)),
              "\n");
  }
  if (text.empty()) text = "no profile stored\n";
  proto::AppAnswer a;
  a.set_text(text);
  a.set_json(SteeringJson(all));
  return a;
}

proto::AppAnswer SteeringApp::Status() const {
  std::string text =
      StrCat("epoch ", options_.epoch_ms, " ms (the last took ",
             absl::FormatDuration(last_epoch_cost_), "), target p",
             options_.percentile == Percentile::kP50   ? "50"
             : options_.percentile == Percentile::kP99 ? "99"
                                                       : "90",
             " ", options_.target_us, " us\n");
  if (stages_.empty()) text += "no replica set is steered (steer=...)\n";
  for (const auto& [key, st] : stages_) {
    StrAppend(&text, key.first, " ", key.second, ": steer ",
              st.config.replica_set().steer(), ", reads ",
              std::llround(st.read_iops), "/s, changes ",
              std::llround(st.change_iops), "/s",
              st.fallback ? ", past 95 % of peak: shares by peak" : "",
              st.note.empty() ? "" : ", " + st.note, "\n");
    for (const MemberPlan& m : st.plan) {
      StrAppend(&text, "  ", m.member, m.write_mode ? " (write mode)" : "",
                "  share ", std::llround(m.share * 1000) / 10.0,
                "%  expected p",
                options_.percentile == Percentile::kP50   ? "50"
                : options_.percentile == Percentile::kP99 ? "99"
                                                          : "90",
                " ", std::llround(m.expected_us), " us\n");
    }
  }
  proto::AppAnswer a;
  a.set_text(text);
  return a;
}

absl::StatusOr<proto::AppAnswer> SteeringApp::OnCall(
    const proto::AppCall& call) {
  if (call.command() == "profile-put") return PutProfile(call);
  if (call.command() == "profile-rm") return RemoveProfile(call);
  if (call.command() == "profiles") return ListProfiles();
  if (call.command() == "status") return Status();
  return absl::InvalidArgumentError(
      StrCat("steering: no command '", call.command(),
             "' (profile-put, profile-rm, profiles, status)"));
}

namespace {

ControlAppRegistration steering_app(
    kSteeringApp,
    [](const std::string& args) -> absl::StatusOr<std::unique_ptr<ControlApp>> {
      auto options = ParseSteeringArgs(args);
      if (!options.ok()) return options.status();
      return std::make_unique<SteeringApp>(*options);
    });

}  // namespace

}  // namespace sroute

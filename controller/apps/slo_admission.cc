// SPDX-License-Identifier: Apache-2.0
#include "controller/apps/slo_admission.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>

#include "absl/strings/str_join.h"
#include "google/protobuf/util/json_util.h"
#include "stages/qos/device_curve.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr size_t kAdmissionDecisionsKept = 50;
constexpr char kApp[] = "slo_admission";

std::string Name(const SloDevice& d) { return StrCat(d.first, "/", d.second); }

double WriteCost(const proto::QosOptions& o) {
  return o.has_write_cost() ? o.write_cost() : 10;
}

// Tokens a reserved IO costs on a device: the stage's own reckoning
// (stages/qos/token_scheduler.h), reads undiscounted.
double CostPerIo(const SloTenant& t, const proto::QosOptions& o) {
  const double reads = t.read_percent / 100.0;
  return reads + (1 - reads) * WriteCost(o);
}

std::vector<SloDevice> DevicesOf(const SloTenant& t) {
  std::vector<SloDevice> out;
  for (const std::string& s : t.on) out.emplace_back(s, t.stage);
  return out;
}

// The device's rate at target `strictest_us` (0: none).
absl::StatusOr<double> CapacityOf(const SloDevice& d,
                                  const proto::QosOptions& o,
                                  uint32_t strictest_us) {
  if (o.tokens_per_s() > 0) return static_cast<double>(o.tokens_per_s());
  if (o.curve_size() == 0) {
    return absl::InvalidArgumentError(
        StrCat(Name(d),
               " has no rate: set its tokens_per_s, or its curve "
               "(sroutectl qos calibrate)"));
  }
  const std::vector<QosCurvePoint> curve = CurveOf(o);
  if (absl::Status s = CheckCurve(curve); !s.ok()) {
    return absl::InvalidArgumentError(
        StrCat(Name(d), "'s curve: ", s.message()));
  }
  const absl::Duration target = strictest_us == 0
                                    ? absl::InfiniteDuration()
                                    : absl::Microseconds(strictest_us);
  const CurveRate r = RateAt(curve, target);
  if (r.below_curve) {
    return absl::InvalidArgumentError(
        StrCat(Name(d), " cannot be held to a p95 of ", strictest_us,
               " us: its curve begins at ",
               absl::ToInt64Microseconds(curve.front().p95), " us"));
  }
  return r.tokens_per_s;
}

absl::StatusOr<uint32_t> Number(std::string_view key, std::string_view value,
                                uint32_t max) {
  char* end = nullptr;
  const std::string v(value);
  const unsigned long n = std::strtoul(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n > max) {
    return absl::InvalidArgumentError(
        StrCat(key, ": a whole number up to ", max, ", not '", value, "'"));
  }
  return static_cast<uint32_t>(n);
}

bool SameTenants(const proto::QosOptions& a, const proto::QosOptions& b) {
  if (a.tenant_size() != b.tenant_size()) return false;
  for (int i = 0; i < a.tenant_size(); ++i) {
    if (a.tenant(i).SerializeAsString() != b.tenant(i).SerializeAsString()) {
      return false;
    }
  }
  return true;
}

// A registration as `qos ls` and `qos status` show it.
void FillTenant(const SloTenant& t, proto::QosAdmission::Tenant* pt) {
  pt->set_name(t.name);
  pt->set_qos_class(t.latency_critical ? "lc" : "be");
  pt->set_iops(t.iops);
  pt->set_read_percent(t.read_percent);
  pt->set_p95_us(t.p95_us);
  pt->set_stage(t.stage);
  for (const std::string& s : t.on) pt->add_on(s);
}

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

}  // namespace

absl::StatusOr<SloAdmissionOptions> ParseSloAdmissionArgs(
    const std::string& args) {
  SloAdmissionOptions o;
  for (std::string_view kv : StrSplit(args, ',')) {
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    const std::string_view key = kv.substr(0, eq);
    const std::string value(eq == std::string_view::npos ? ""
                                                         : kv.substr(eq + 1));
    char* end = nullptr;
    const double x = std::strtod(value.c_str(), &end);
    const bool number = !value.empty() && *end == '\0';
    if (key == "report_after" && number && x >= 1 && x <= 1000) {
      o.report_after = static_cast<int>(x);
    } else if (key == "min_share" && number && x >= 0 && x <= 0.5) {
      o.min_share = x;
    } else if (key == "move" && number && x > 0 && x <= 1) {
      o.move = x;
    } else {
      return absl::InvalidArgumentError(
          StrCat("slo_admission: '", kv,
                 "' is not one of report_after=1..1000, min_share=0..0.5, "
                 "move=0..1"));
    }
  }
  return o;
}

std::string FormatSloTenants(const std::vector<SloTenant>& tenants) {
  std::string out;
  for (const SloTenant& t : tenants) {
    StrAppend(&out, t.name, " ", t.latency_critical ? "lc" : "be", " ", t.iops,
              " ", t.read_percent, " ", t.p95_us, " ", t.stage, " ",
              absl::StrJoin(t.on, "+"), "\n");
  }
  return out;
}

absl::StatusOr<std::vector<SloTenant>> ParseSloTenants(
    const std::string& text) {
  std::vector<SloTenant> out;
  for (std::string_view line : StrSplit(text, '\n')) {
    if (line.empty()) continue;
    std::vector<std::string_view> f = StrSplit(line, ' ');
    if (f.size() != 7) {
      return absl::DataLossError(StrCat("slo_admission state: '", line, "'"));
    }
    SloTenant t;
    t.name = std::string(f[0]);
    t.latency_critical = f[1] == "lc";
    auto iops = Number("iops", f[2], UINT32_MAX);
    auto reads = Number("read_percent", f[3], 100);
    auto p95 = Number("p95_us", f[4], UINT32_MAX);
    if (!iops.ok() || !reads.ok() || !p95.ok()) {
      return absl::DataLossError(StrCat("slo_admission state: '", line, "'"));
    }
    t.iops = *iops;
    t.read_percent = *reads;
    t.p95_us = *p95;
    t.stage = std::string(f[5]);
    for (std::string_view s : StrSplit(f[6], '+')) {
      if (!s.empty()) t.on.emplace_back(s);
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<SloPlan> PlanSlo(
    const std::vector<SloTenant>& tenants,
    const std::map<SloDevice, proto::QosOptions>& current,
    const std::map<std::string, std::map<SloDevice, double>>& demand,
    double min_share) {
  SloPlan plan;
  // Each device's strictest target, then its capacity.
  for (const SloTenant& t : tenants) {
    for (const SloDevice& d : DevicesOf(t)) {
      auto it = current.find(d);
      if (it == current.end()) {
        return absl::NotFoundError(
            StrCat(t.name, ": no qos stage ", Name(d), " is known"));
      }
      SloPlan::Device& dev = plan.devices[d];
      dev.options = it->second;
      dev.options.clear_tenant();
      if (t.latency_critical && t.p95_us > 0 &&
          (dev.strictest_us == 0 || t.p95_us < dev.strictest_us)) {
        dev.strictest_us = t.p95_us;
      }
    }
  }
  std::map<SloDevice, double> free;
  for (auto& [d, dev] : plan.devices) {
    bool lc = false;
    for (const SloTenant& t : tenants) {
      const auto on = DevicesOf(t);
      lc |=
          t.latency_critical && std::find(on.begin(), on.end(), d) != on.end();
    }
    if (!lc) continue;  // best effort only: nothing to hold
    auto capacity = CapacityOf(d, dev.options, dev.strictest_us);
    if (!capacity.ok()) return capacity.status();
    dev.capacity = *capacity;
    free[d] = *capacity;
  }
  // Tenants on one device first: their place is fixed.
  std::map<SloDevice, std::vector<std::string>> takers;
  for (const SloTenant& t : tenants) {
    if (!t.latency_critical || t.on.size() != 1) continue;
    const SloDevice d = DevicesOf(t)[0];
    const double need = t.iops * CostPerIo(t, plan.devices[d].options);
    free[d] -= need;
    takers[d].push_back(StrCat(t.name, " ", std::llround(need)));
    plan.shares[t.name][d] = t.iops;
  }
  for (const auto& [d, left] : free) {
    if (left >= -1e-6) continue;
    const SloPlan::Device& dev = plan.devices[d];
    return absl::FailedPreconditionError(StrCat(
        Name(d), " cannot hold its reservations: they need ",
        std::llround(dev.capacity - left), " tokens/s (",
        absl::StrJoin(takers[d], ", "), ") and it serves ",
        std::llround(dev.capacity), " within ", dev.strictest_us,
        " us: ", std::llround(std::ceil(-left - 1e-6)), " tokens/s short"));
  }
  auto shortfall = [&](const SloTenant& t, double tokens) {
    std::vector<std::string> where;
    for (const SloDevice& d : DevicesOf(t)) {
      const SloPlan::Device& dev = plan.devices[d];
      where.push_back(StrCat(Name(d), " has ", std::llround(free[d]), " of ",
                             std::llround(dev.capacity), " left within ",
                             dev.strictest_us, " us"));
    }
    return absl::FailedPreconditionError(
        StrCat(t.name, "'s reservation does not fit on its servers: ",
               std::llround(std::ceil(tokens)), " tokens/s short (",
               absl::StrJoin(where, "; "), ")"));
  };
  // Then each spanning tenant, split by demand within what is free.
  for (const SloTenant& t : tenants) {
    if (!t.latency_critical || t.on.size() < 2) continue;
    const std::vector<SloDevice> on = DevicesOf(t);
    std::vector<double> weight(on.size(), 0);
    double total = 0;
    if (auto it = demand.find(t.name); it != demand.end()) {
      for (size_t i = 0; i < on.size(); ++i) {
        auto j = it->second.find(on[i]);
        weight[i] = j == it->second.end() ? 0 : std::max(0.0, j->second);
        total += weight[i];
      }
    }
    // Each device its share of the demand, but at least `floor`: those
    // below it get it, the others share the rest by their demand.
    const double floor = std::min(min_share, 1.0 / on.size());
    for (double& w : weight) w = total > 0 ? w / total : 1.0 / on.size();
    std::vector<bool> floored(on.size(), false);
    for (bool again = true; again;) {
      again = false;
      double rest = 1, demand_left = 0;
      for (size_t i = 0; i < on.size(); ++i) {
        if (floored[i]) {
          rest -= floor;
        } else {
          demand_left += weight[i];
        }
      }
      for (size_t i = 0; i < on.size(); ++i) {
        if (floored[i]) continue;
        const double w = demand_left > 0 ? rest * weight[i] / demand_left : 0;
        if (w < floor - 1e-12) {
          floored[i] = true;
          again = true;
        }
      }
      if (again) continue;
      for (size_t i = 0; i < on.size(); ++i) {
        weight[i] =
            floored[i] ? floor
                       : (demand_left > 0 ? rest * weight[i] / demand_left : 0);
      }
    }
    // Water-filling: a device short of room passes the rest on to the
    // others, by their weights.
    std::vector<double> share(on.size(), 0);
    double left = t.iops;
    for (size_t round = 0; round < on.size() && left > 1e-6; ++round) {
      double open_weight = 0;
      for (size_t i = 0; i < on.size(); ++i) {
        const double cost = CostPerIo(t, plan.devices[on[i]].options);
        if (free[on[i]] / cost - share[i] > 1e-9) open_weight += weight[i];
      }
      if (open_weight <= 0) break;
      const double handing = left;
      for (size_t i = 0; i < on.size(); ++i) {
        const double cost = CostPerIo(t, plan.devices[on[i]].options);
        const double room = free[on[i]] / cost - share[i];
        if (room <= 1e-9) continue;
        const double give = std::min(room, handing * weight[i] / open_weight);
        share[i] += give;
        left -= give;
      }
    }
    if (left > 1e-6) {
      return shortfall(t, left * CostPerIo(t, plan.devices[on[0]].options));
    }
    for (size_t i = 0; i < on.size(); ++i) {
      free[on[i]] -= share[i] * CostPerIo(t, plan.devices[on[i]].options);
      plan.shares[t.name][on[i]] = share[i];
    }
  }
  // Each device's tenant list, in registration order.
  for (const SloTenant& t : tenants) {
    for (const SloDevice& d : DevicesOf(t)) {
      SloPlan::Device& dev = plan.devices[d];
      proto::QosOptions::Tenant* pt = dev.options.add_tenant();
      pt->set_name(t.name);
      if (!t.latency_critical) {
        pt->set_qos_class("be");
        continue;
      }
      const double share = plan.shares[t.name][d];
      pt->set_qos_class("lc");
      // The stage takes whole IOPS, at least one: a share rounds up.
      pt->set_iops(std::max<uint32_t>(1, std::ceil(share - 1e-6)));
      pt->set_read_percent(t.read_percent);
      pt->set_p95_us(t.p95_us);
      dev.reserved += share * CostPerIo(t, dev.options);
    }
  }
  return plan;
}

SloAdmission::SloAdmission(SloAdmissionOptions options)
    : options_(std::move(options)) {}

absl::Status SloAdmission::Start(ControllerApi& api) {
  api_ = &api;
  if (auto d = api.GetState("decisions"); d.ok()) {
    for (std::string_view line : StrSplit(*d, '\n')) {
      if (!line.empty()) decisions_.emplace_back(line);
    }
  }
  auto state = api.GetState("tenants");
  if (state.ok()) {
    auto tenants = ParseSloTenants(*state);
    if (!tenants.ok()) return tenants.status();
    tenants_ = *std::move(tenants);
  } else if (!absl::IsNotFound(state.status())) {
    return state.status();
  }
  // The plan comes with the first stats that show every device (the hosts
  // may not be connected yet).
  LogInfo("slo_admission: ", tenants_.size(), " tenants registered");
  return absl::OkStatus();
}

absl::StatusOr<std::map<SloDevice, proto::QosOptions>>
SloAdmission::CurrentOptions(const std::vector<SloTenant>& tenants) const {
  std::map<SloDevice, proto::QosOptions> out;
  std::set<std::string> asked;
  for (const SloTenant& t : tenants) {
    for (const std::string& sswitch : t.on) {
      if (!asked.insert(sswitch).second) continue;
      proto::Stages list;
      list.set_action(proto::Stages::LIST);
      auto stages = api_->Stages(sswitch, list);
      if (!stages.ok()) {
        return absl::Status(
            stages.status().code(),
            StrCat("the stages of ", sswitch,
                   " cannot be listed: ", stages.status().message()));
      }
      for (const proto::StageStats& s : *stages) {
        if (s.config().kind() == "qos") {
          out[{sswitch, s.config().name()}] = s.config().qos();
        }
      }
    }
  }
  for (const SloTenant& t : tenants) {
    for (const SloDevice& d : DevicesOf(t)) {
      if (out.count(d) == 0) {
        return absl::NotFoundError(StrCat(d.first, " has no qos stage ",
                                          d.second, " (tenant ", t.name, ")"));
      }
    }
  }
  return out;
}

std::map<std::string, std::map<SloDevice, double>> SloAdmission::Demand()
    const {
  std::map<std::string, std::map<SloDevice, double>> demand;
  for (const auto& [name, by_device] : seen_) {
    const auto shares = plan_.shares.find(name);
    for (const auto& [d, s] : by_device) {
      double want = s.demand;
      // Requests that waited for tokens there: the tenant asks more than
      // its share, whatever arrived (a caller whose queue depth is full
      // sends no faster than it is served, and would keep a share cut
      // while its load was elsewhere).
      if (s.hits > 0 && shares != plan_.shares.end()) {
        auto it = shares->second.find(d);
        if (it != shares->second.end()) want = std::max(want, 2 * it->second);
      }
      demand[name][d] = want;
    }
  }
  return demand;
}

absl::Status SloAdmission::Adopt(std::vector<SloTenant> tenants) {
  // The devices of the registrations before too: those no tenant names any
  // more are cleared.
  std::vector<SloTenant> both = tenants;
  both.insert(both.end(), tenants_.begin(), tenants_.end());
  auto now = CurrentOptions(both);
  if (!now.ok()) return now.status();
  const auto demand = Demand();
  auto plan = PlanSlo(tenants, *now, demand, options_.min_share);
  if (!plan.ok()) return plan.status();
  // Durable before anyone is told.
  if (absl::Status s = api_->PutState("tenants", FormatSloTenants(tenants));
      !s.ok()) {
    return s;
  }
  // Devices no tenant names any more lose the app's tenants.
  for (const auto& [d, options] : *now) {
    if (plan->devices.count(d) > 0) continue;
    bool named_before = false;
    for (const SloTenant& t : tenants_) {
      for (const SloDevice& old : DevicesOf(t)) named_before |= old == d;
    }
    if (named_before) {
      plan->devices[d].options = options;
      plan->devices[d].options.clear_tenant();
    }
  }
  tenants_ = std::move(tenants);
  plan_ = *std::move(plan);
  Push(*now);
  return absl::OkStatus();
}

void SloAdmission::Push(const std::map<SloDevice, proto::QosOptions>& now) {
  for (const auto& [d, dev] : plan_.devices) {
    auto it = now.find(d);
    if (it == now.end() || SameTenants(it->second, dev.options)) continue;
    proto::Stages set;
    set.set_action(proto::Stages::SET);
    set.mutable_stage()->set_name(d.second);
    set.mutable_stage()->set_kind("qos");
    proto::QosOptions* o = set.mutable_stage()->mutable_qos();
    *o = it->second;  // the device's own settings as they are now
    *o->mutable_tenant() = dev.options.tenant();
    auto done = api_->Stages(d.first, set);
    if (!done.ok()) {
      LogWarning("slo_admission: ", Name(d),
                 " keeps its old tenants until the next stats: ",
                 done.status().message());
      continue;
    }
    std::vector<std::string> list;
    for (const auto& t : dev.options.tenant()) {
      list.push_back(t.qos_class() == "lc"
                         ? StrCat(t.name(), "=", t.iops(), "iops")
                         : t.name());
    }
    Decide(StrCat("pushed ", Name(d), ": ",
                  list.empty() ? "no tenants" : absl::StrJoin(list, " ")));
  }
}

void SloAdmission::Decide(const std::string& line) {
  LogInfo("slo_admission: ", line);
  decisions_.push_back(
      StrCat(absl::FormatTime("%H:%M:%S", api_->Now(), absl::LocalTimeZone()),
             " ", line));
  while (decisions_.size() > kAdmissionDecisionsKept) decisions_.pop_front();
  std::string all;
  for (const std::string& d : decisions_) StrAppend(&all, d, "\n");
  (void)api_->PutState("decisions", all);
}

void SloAdmission::OnStats(const StatsSnapshot& stats) {
  // What each device of the registrations reports.
  std::map<SloDevice, proto::QosOptions> now;
  for (const HostStats& h : stats.hosts) {
    for (const proto::StageStats& s : h.stages) {
      if (s.config().kind() != "qos") continue;
      const SloDevice d{h.sswitch, s.config().name()};
      now[d] = s.config().qos();
      const double seconds = std::max(1e-3, absl::ToDoubleSeconds(h.interval));
      for (const SloTenant& t : tenants_) {
        const auto on = DevicesOf(t);
        if (std::find(on.begin(), on.end(), d) == on.end()) continue;
        auto counter = [&](const char* key) -> int64_t {
          auto it = s.counters().find(StrCat(t.name, ".", key));
          return it == s.counters().end() ? 0 : it->second;
        };
        Seen& seen = seen_[t.name][d];
        const int64_t arrived = counter("arrived");
        const int64_t hits = counter("deficit_floor_hits");
        // A counter that went back: the stage was made anew.
        seen.demand = seen.arrived < 0 || arrived < seen.arrived
                          ? 0
                          : (arrived - seen.arrived) / seconds;
        seen.hits = seen.floor_hits < 0 || hits < seen.floor_hits
                        ? 0
                        : hits - seen.floor_hits;
        seen.arrived = arrived;
        seen.floor_hits = hits;
        seen.iops = counter("iops");
        seen.p95_us = counter("p95_us");
      }
    }
  }
  // Tenants that keep hitting their floor.
  for (const SloTenant& t : tenants_) {
    if (!t.latency_critical) continue;
    int64_t hits = 0;
    std::vector<std::string> where;
    for (const auto& [d, seen] : seen_[t.name]) {
      hits += seen.hits;
      if (seen.hits > 0) where.push_back(Name(d));
    }
    int& streak = hit_streak_[t.name];
    streak = hits > 0 ? streak + 1 : 0;
    if (streak == options_.report_after) {
      LogWarning("slo_admission: tenant ", t.name, " hit its deficit floor in ",
                 streak,
                 " stats intervals in a row: renegotiate its reservation");
      Decide(StrCat("renegotiate ", t.name, ": deficit floor hit in ", streak,
                    " intervals in a row on ", absl::StrJoin(where, ", "), " (",
                    t.iops, " IOPS reserved)"));
    }
  }
  // Every device seen: plan (again, if demand moved a spanning tenant's
  // split far enough), and bring the stages in line.
  bool all_seen = true;
  for (const SloTenant& t : tenants_) {
    for (const SloDevice& d : DevicesOf(t)) all_seen &= now.count(d) > 0;
  }
  if (!all_seen) return;
  const auto demand = Demand();
  auto next = PlanSlo(tenants_, now, demand, options_.min_share);
  if (!next.ok()) {
    if (plan_.devices.empty()) {
      LogWarning("slo_admission: the registrations do not fit now: ",
                 next.status().message());
    }
  } else {
    bool move = plan_.devices.empty();
    for (const SloTenant& t : tenants_) {
      for (const auto& [d, share] : next->shares[t.name]) {
        const double old = plan_.shares[t.name][d];
        move |= std::abs(share - old) >= options_.move * t.iops - 1e-9 &&
                std::abs(share - old) >= 1;
      }
    }
    for (const auto& [d, dev] : next->devices) {
      move |= plan_.devices.count(d) == 0;
    }
    if (move) {
      // Keep the devices no tenant names any more (cleared) in the plan.
      for (const auto& [d, dev] : plan_.devices) {
        if (next->devices.count(d) == 0) next->devices[d] = dev;
      }
      plan_ = *std::move(next);
    }
  }
  Push(now);
}

absl::StatusOr<proto::AppAnswer> SloAdmission::OnCall(
    const proto::AppCall& call) {
  if (call.command() == "register") return Register(call);
  if (call.command() == "unregister") return Unregister(call);
  if (call.command() == "ls") return List();
  if (call.command() == "status") return Status();
  return absl::InvalidArgumentError(
      StrCat("slo_admission: no command '", call.command(),
             "' (register, unregister, ls, status)"));
}

absl::StatusOr<proto::AppAnswer> SloAdmission::Register(
    const proto::AppCall& call) {
  if (call.args_size() < 1 || call.args(0).find('=') != std::string::npos) {
    return absl::InvalidArgumentError(
        "register TENANT class=lc|be iops=N read_percent=P p95_us=U "
        "stage=NAME on=SSWITCH[+SSWITCH...]");
  }
  SloTenant t;
  t.name = call.args(0);
  if (t.name.find_first_of(" \t\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        StrCat("a tenant's name has no spaces: '", t.name, "'"));
  }
  std::string cls = "lc";
  for (int i = 1; i < call.args_size(); ++i) {
    const std::string& kv = call.args(i);
    const size_t eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : kv.substr(eq + 1);
    absl::StatusOr<uint32_t> n = 0u;
    if (key == "class") {
      cls = value;
    } else if (key == "iops") {
      n = Number(key, value, 10'000'000);
      if (n.ok()) t.iops = *n;
    } else if (key == "read_percent") {
      n = Number(key, value, 100);
      if (n.ok()) t.read_percent = *n;
    } else if (key == "p95_us") {
      n = Number(key, value, 60'000'000);
      if (n.ok()) t.p95_us = *n;
    } else if (key == "stage") {
      t.stage = value;
    } else if (key == "on") {
      for (std::string_view s : StrSplit(value, '+')) {
        if (!s.empty()) t.on.emplace_back(s);
      }
    } else {
      return absl::InvalidArgumentError(
          StrCat("register: unknown argument '", kv,
                 "' (class, iops, read_percent, p95_us, stage, on)"));
    }
    if (!n.ok()) return n.status();
  }
  if (cls != "lc" && cls != "be") {
    return absl::InvalidArgumentError(
        StrCat("class: lc or be, not '", cls, "'"));
  }
  t.latency_critical = cls == "lc";
  if (t.stage.empty() || t.on.empty()) {
    return absl::InvalidArgumentError(
        "register: name the qos stage (stage=NAME) and the sSwitches it is "
        "on (on=S1+S2)");
  }
  if (t.stage.find_first_of(" \t\n") != std::string::npos) {
    return absl::InvalidArgumentError("a stage's name has no spaces");
  }
  std::sort(t.on.begin(), t.on.end());
  if (std::adjacent_find(t.on.begin(), t.on.end()) != t.on.end()) {
    return absl::InvalidArgumentError("on: an sSwitch is named twice");
  }
  if (t.latency_critical && (t.iops == 0 || t.p95_us == 0)) {
    return absl::InvalidArgumentError(
        "a latency-critical tenant reserves iops=N with a target p95_us=U");
  }
  if (!t.latency_critical) t.iops = t.p95_us = 0;
  std::vector<SloTenant> next = tenants_;
  bool changed = false;
  for (SloTenant& old : next) {
    if (old.name == t.name) {
      old = t;
      changed = true;
    }
  }
  if (!changed) next.push_back(t);
  if (absl::Status s = Adopt(std::move(next)); !s.ok()) {
    if (!absl::IsFailedPrecondition(s) && !absl::IsInvalidArgument(s)) {
      return s;
    }
    Decide(StrCat("refused ", t.name, ": ", s.message()));
    return absl::Status(s.code(), StrCat(t.name, " is refused: ", s.message()));
  }
  std::vector<std::string> shares;
  for (const auto& [d, share] : plan_.shares[t.name]) {
    shares.push_back(StrCat(Name(d), " ", std::llround(share), " IOPS"));
  }
  Decide(StrCat(changed ? "changed " : "admitted ", t.name, " (", cls,
                t.latency_critical
                    ? StrCat(" ", t.iops, " IOPS at ", t.read_percent,
                             "% reads, p95 ", t.p95_us, " us")
                    : "",
                ")"));
  proto::AppAnswer a;
  a.set_text(StrCat(changed ? "changed " : "admitted ", t.name,
                    shares.empty() ? "" : ": ", absl::StrJoin(shares, ", ")));
  return a;
}

absl::StatusOr<proto::AppAnswer> SloAdmission::Unregister(
    const proto::AppCall& call) {
  if (call.args_size() != 1) {
    return absl::InvalidArgumentError("unregister TENANT");
  }
  std::vector<SloTenant> next;
  for (const SloTenant& t : tenants_) {
    if (t.name != call.args(0)) next.push_back(t);
  }
  if (next.size() == tenants_.size()) {
    return absl::NotFoundError(
        StrCat("no tenant ", call.args(0), " is registered"));
  }
  if (absl::Status s = Adopt(next); !s.ok()) {
    // A host that cannot be asked must not keep a tenant registered: the
    // stages follow once their stats come.
    if (absl::Status p = api_->PutState("tenants", FormatSloTenants(next));
        !p.ok()) {
      return p;
    }
    tenants_ = std::move(next);
    seen_.erase(call.args(0));
    Decide(StrCat("unregistered ", call.args(0),
                  " (stages follow: ", s.message(), ")"));
    proto::AppAnswer a;
    a.set_text(
        StrCat("unregistered ", call.args(0),
               "; its stages follow when their hosts answer: ", s.message()));
    return a;
  }
  seen_.erase(call.args(0));
  hit_streak_.erase(call.args(0));
  Decide(StrCat("unregistered ", call.args(0)));
  proto::AppAnswer a;
  a.set_text(StrCat("unregistered ", call.args(0)));
  return a;
}

proto::AppAnswer SloAdmission::List() const {
  proto::QosAdmission m;
  std::string text = "TENANT  CLASS  IOPS  READ%  P95_US  STAGE  ON\n";
  for (const SloTenant& t : tenants_) {
    proto::QosAdmission::Tenant* pt = m.add_tenants();
    FillTenant(t, pt);
    StrAppend(&text, t.name, "  ", pt->qos_class(), "  ",
              t.latency_critical ? StrCat(t.iops) : "-", "  ",
              t.latency_critical ? StrCat(t.read_percent) : "-", "  ",
              t.latency_critical ? StrCat(t.p95_us) : "-", "  ", t.stage, "  ",
              absl::StrJoin(t.on, ","), "\n");
  }
  proto::AppAnswer a;
  a.set_text(text);
  a.set_json(ToJson(m));
  return a;
}

proto::AppAnswer SloAdmission::Status() const {
  proto::QosAdmission m;
  std::string text = "DEVICE  CAPACITY  RESERVED  STRICTEST_P95_US\n";
  for (const auto& [d, dev] : plan_.devices) {
    proto::QosAdmission::Device* pd = m.add_devices();
    pd->set_sswitch(d.first);
    pd->set_stage(d.second);
    pd->set_capacity_tokens_per_s(dev.capacity);
    pd->set_reserved_tokens_per_s(dev.reserved);
    pd->set_strictest_p95_us(dev.strictest_us);
    StrAppend(&text, Name(d), "  ", std::llround(dev.capacity), "  ",
              std::llround(dev.reserved), "  ", dev.strictest_us, "\n");
  }
  StrAppend(&text,
            "\nTENANT  DEVICE  RESERVED_IOPS  DEMAND_IOPS  IOPS  P95_US  "
            "SLO_US  FLOOR_HITS  STATE\n");
  for (const SloTenant& t : tenants_) {
    proto::QosAdmission::Tenant* pt = m.add_tenants();
    FillTenant(t, pt);
    auto streak = hit_streak_.find(t.name);
    pt->set_floor_hit_intervals(streak == hit_streak_.end() ? 0
                                                            : streak->second);
    pt->set_renegotiate(t.latency_critical &&
                        pt->floor_hit_intervals() >= options_.report_after);
    const auto shares = plan_.shares.find(t.name);
    const auto seen = seen_.find(t.name);
    for (const SloDevice& d : DevicesOf(t)) {
      proto::QosAdmission::Share* s = pt->add_shares();
      s->set_sswitch(d.first);
      s->set_stage(d.second);
      if (shares != plan_.shares.end()) {
        auto it = shares->second.find(d);
        if (it != shares->second.end()) s->set_reserved_iops(it->second);
      }
      if (seen != seen_.end()) {
        auto it = seen->second.find(d);
        if (it != seen->second.end()) {
          s->set_demand_iops(it->second.demand);
          s->set_iops(it->second.iops);
          s->set_p95_us(it->second.p95_us);
          s->set_deficit_floor_hits(it->second.hits);
        }
      }
      const std::string state = !t.latency_critical      ? "best-effort"
                                : pt->renegotiate()      ? "renegotiate"
                                : s->p95_us() > t.p95_us ? "over-slo"
                                                         : "ok";
      StrAppend(
          &text, t.name, "  ", Name(d), "  ",
          t.latency_critical ? StrCat(std::llround(s->reserved_iops())) : "-",
          "  ", std::llround(s->demand_iops()), "  ", s->iops(), "  ",
          s->p95_us(), "  ", t.latency_critical ? StrCat(t.p95_us) : "-", "  ",
          s->deficit_floor_hits(), "  ", state, "\n");
    }
  }
  proto::AppAnswer a;
  a.set_text(text);
  a.set_json(ToJson(m));
  return a;
}

namespace {

ControlAppRegistration slo_admission_app(
    kApp,
    [](const std::string& args) -> absl::StatusOr<std::unique_ptr<ControlApp>> {
      auto options = ParseSloAdmissionArgs(args);
      if (!options.ok()) return options.status();
      return std::make_unique<SloAdmission>(*options);
    });

}  // namespace

}  // namespace sroute

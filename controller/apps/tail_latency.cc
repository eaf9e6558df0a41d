// SPDX-License-Identifier: Apache-2.0
#include "controller/apps/tail_latency.h"

#include <algorithm>
#include <cstdlib>
#include <set>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rules/parser.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr char kOwner[] = "tail_latency";
constexpr char kOffloadFolder[] = ".sroute-tl-";
constexpr uint32_t kReclaimStepMs = 500;  // a reclaim step's budget at the host
constexpr size_t kTailDecisionsKept = 32;

// "//S1/vol/*" moved into "//T/.sroute-tl-G": "//T/.sroute-tl-G/vol/*".
std::string Into(const std::string& folder, const std::string& file) {
  const size_t slash = file.find('/', 2);
  return StrCat(folder, "/",
                slash == std::string::npos ? "" : file.substr(slash + 1));
}

absl::StatusOr<double> Number(std::string_view key, const std::string& v,
                              double min) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(d >= min)) {
    return absl::InvalidArgumentError(StrCat("tail_latency: ", key,
                                             ": a number of at least ", min,
                                             ", not '", v, "'"));
  }
  return d;
}

std::string Canonical(const std::string& text) {
  auto r = ParseRule(text);
  return r.ok() ? FormatRule(*r) : text;
}

std::string Ops(double v) { return StrCat(static_cast<int64_t>(v + 0.5)); }

}  // namespace

absl::StatusOr<TailLatencyOptions> ParseTailLatencyArgs(
    const std::string& args) {
  TailLatencyOptions o;
  for (std::string_view kv : StrSplit(args, ',')) {
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          StrCat("tail_latency: expected key=value, not '", kv, "'"));
    }
    const std::string_view key = kv.substr(0, eq);
    const std::string value(kv.substr(eq + 1));
    absl::StatusOr<double> d = 0.0;
    if (key == "alpha" || key == "end") {
      d = Number(key, value, 1);
      if (d.ok()) (key == "alpha" ? o.alpha : o.end) = *d;
    } else if (key == "min_ops") {
      d = Number(key, value, 0);
      if (d.ok()) o.min_ops = *d;
    } else if (key == "window" || key == "hold" || key == "cooldown") {
      d = Number(key, value, key == "window" ? 0.1 : 0);
      if (d.ok()) {
        (key == "window" ? o.window
         : key == "hold" ? o.hold
                         : o.cooldown) = absl::Seconds(*d);
      }
    } else if (key == "queue") {
      d = Number(key, value, 0);
      if (d.ok()) o.queue = static_cast<int64_t>(*d);
    } else if (key == "flows" || key == "spread") {
      d = Number(key, value, 1);
      if (d.ok()) (key == "flows" ? o.flows : o.spread) = static_cast<int>(*d);
    } else if (key == "rate" || key == "chunk") {
      uint64_t& bytes = key == "rate" ? o.rate_bytes_per_s : o.chunk_bytes;
      if (!ParseByteSize(value, &bytes) || bytes == 0) {
        return absl::InvalidArgumentError(
            StrCat("tail_latency: ", key, ": ",
                   key == "rate" ? "bytes per second such as 32M"
                                 : "bytes such as 64K",
                   ", not '", value, "'"));
      }
    } else if (key == "hosts") {
      for (std::string_view h : StrSplit(value, '+')) {
        if (!h.empty()) o.hosts.emplace_back(h);
      }
    } else {
      return absl::InvalidArgumentError(StrCat(
          "tail_latency: unknown key '", key,
          "' (known: alpha, end, window, min_ops, hold, cooldown, rate, chunk, "
          "flows, spread, queue, hosts)"));
    }
    if (!d.ok()) return d.status();
  }
  if (o.end >= o.alpha) {
    return absl::InvalidArgumentError(
        StrCat("tail_latency: end (", o.end, ") must be below alpha (", o.alpha,
               "), or a burst would never begin or never end"));
  }
  return o;
}

TailLatency::TailLatency(TailLatencyOptions options)
    : options_(std::move(options)) {}

absl::Time TailLatency::Now() const {
  return options_.clock ? options_.clock() : api_->Now();
}

absl::Status TailLatency::Start(ControllerApi& api) {
  api_ = &api;
  if (auto g = api.GetState("generation"); g.ok()) {
    generation_ = std::strtoull(g->c_str(), nullptr, 10);
  }
  if (auto d = api.GetState("decisions"); d.ok()) {
    for (std::string_view line : StrSplit(*d, '\n')) {
      if (!line.empty()) decisions_.emplace_back(line);
    }
  }
  auto flows = api.GetState("flows");
  if (flows.ok()) {
    for (std::string_view line : StrSplit(*flows, '\n')) {
      std::vector<std::string> f;
      for (std::string_view x : StrSplit(line, '\t')) f.emplace_back(x);
      if (f.size() != 10) continue;
      Moved m;
      m.phase = f[0] == "reclaiming" ? Moved::Phase::kReclaiming
                                     : Moved::Phase::kAway;
      m.sswitch = f[1];
      m.flow = f[2];
      m.server = f[3];
      for (std::string_view t : StrSplit(f[4], ',')) m.targets.emplace_back(t);
      for (std::string_view t : StrSplit(f[5], ',')) m.folders.emplace_back(t);
      m.away_rule = f[6];
      m.home_rule = f[7];
      m.since = absl::FromUnixSeconds(std::strtoll(f[8].c_str(), nullptr, 10));
      m.long_run = std::strtod(f[9].c_str(), nullptr);
      servers_[m.server].long_run = m.long_run;
      LogInfo("tail_latency: resuming ", f[0], " of ", m.flow, " on ",
              m.sswitch, " (writes to ", absl::StrJoin(m.targets, ","), ")");
      moved_.push_back(std::move(m));
    }
  } else if (!absl::IsNotFound(flows.status())) {
    return flows.status();
  }
  return absl::OkStatus();
}

void TailLatency::Save() {
  std::string flows;
  for (const Moved& m : moved_) {
    StrAppend(
        &flows, m.phase == Moved::Phase::kReclaiming ? "reclaiming" : "away",
        "\t", m.sswitch, "\t", m.flow, "\t", m.server, "\t",
        absl::StrJoin(m.targets, ","), "\t", absl::StrJoin(m.folders, ","),
        "\t", m.away_rule, "\t", m.home_rule, "\t",
        absl::ToUnixSeconds(m.since), "\t", m.long_run, "\n");
  }
  if (absl::Status s = api_->PutState("flows", flows); !s.ok()) {
    LogWarning("tail_latency: saving its state: ", s.message());
  }
  (void)api_->PutState("generation", StrCat(generation_));
}

void TailLatency::Note(const std::string& decision) {
  LogInfo("tail_latency: ", decision);
  decisions_.push_back(StrCat(
      absl::FormatTime("%H:%M:%S", Now(), absl::UTCTimeZone()), " ", decision));
  while (decisions_.size() > kTailDecisionsKept) decisions_.pop_front();
  std::string all;
  for (const std::string& d : decisions_) StrAppend(&all, d, "\n");
  (void)api_->PutState("decisions", all);
}

void TailLatency::OnStats(const StatsSnapshot& stats) { Decide(stats); }

// The phases of one report, in order: Measure, EndOffLoads,
// OffLoadBursts, UpdateLongRun.
void TailLatency::Decide(const StatsSnapshot& stats) {
  const Interval in = Measure(stats);
  const absl::Time now = Now();
  EndOffLoads(now);
  OffLoadBursts(in, now);
  UpdateLongRun(in);
}

// Each server's demand, service and queue over the report's interval, and
// the flows (single-target write rules of other owners) that could move.
TailLatency::Interval TailLatency::Measure(const StatsSnapshot& stats) {
  // Servers each host reaches, by endpoint name.
  Interval in;
  auto& reach = in.reach;
  for (const TopologyHost& h : api_->Topology()) {
    for (const proto::EndpointInfo& e : h.info.endpoints()) {
      if (e.kind() == "server") reach[h.info.sswitch()].insert(e.name());
    }
  }
  auto wanted = [&](const std::string& sswitch) {
    return options_.hosts.empty() ||
           std::find(options_.hosts.begin(), options_.hosts.end(), sswitch) !=
               options_.hosts.end();
  };
  // Demand and service of every server over the interval.
  std::map<std::string, double> demand, served;
  std::map<std::string, int64_t> queued;
  std::vector<Flow>& flows = in.flows;
  double& secs = in.secs;
  for (const HostStats& h : stats.hosts) {
    if (!wanted(h.sswitch) || !reach.contains(h.sswitch)) continue;
    secs = std::max(1e-3, absl::ToDoubleSeconds(h.interval));
    for (const RuleStats& r : h.rules) {
      if (r.text.empty()) continue;
      const double ops = (r.reads + r.writes + r.others) / secs;
      const double writes = r.writes / secs;
      if (r.owner == kOwner) {
        // Our off-load or home rule: its writes are the flow's demand,
        // served where they go.
        for (const Moved& m : moved_) {
          if (m.sswitch != h.sswitch) continue;
          if (r.text == m.away_rule) {
            demand[m.server] += writes;
            for (const std::string& t : m.targets) {
              served[t] += writes / m.targets.size();
            }
          } else if (r.text == m.home_rule) {
            demand[m.server] += writes;
            served[m.server] += writes;
            queued[m.server] += r.in_flight;
          }
        }
        continue;
      }
      auto rule = ParseRule(r.text);
      if (!rule.ok() || rule->delegate ||
          !(rule->pattern.ops & kOpClassWrite) || rule->detours.size() != 1 ||
          rule->detours[0].what != Detour::What::kIo ||
          rule->detours[0].target.kind != Target::Kind::kFile ||
          rule->pattern.file.range ||
          (rule->pattern.file.kind != FilePattern::Kind::kExact &&
           rule->pattern.file.kind != FilePattern::Kind::kPrefix)) {
        continue;
      }
      Flow f;
      f.sswitch = h.sswitch;
      f.text = FormatRule(*rule);
      f.priority = rule->priority;
      f.target = rule->detours[0].target.file;
      f.server = EndpointOf(f.target);
      if (!reach[h.sswitch].contains(f.server)) continue;
      HeaderPattern w = rule->pattern;
      w.ops = kOpClassWrite;
      f.write_pattern = FormatPattern(w);
      f.writes = writes;
      demand[f.server] += ops;
      served[f.server] += ops;
      queued[f.server] += r.in_flight;
      flows.push_back(std::move(f));
    }
  }
  std::set<std::string>& names = in.names;
  for (const auto& [name, set] : reach) names.insert(set.begin(), set.end());
  for (const std::string& name : names) {
    Server& s = servers_[name];
    s.recent = demand[name];
    s.served = served[name];
    s.queued = queued[name];
    if (s.long_run < 0 && s.recent > 0) {
      if (s.had_demand) s.long_run = s.recent;
      s.had_demand = true;
    }
  }

  return in;
}

void TailLatency::EndOffLoads(absl::Time now) {
  // Off-loads that can end, and reclaims under way.
  for (size_t i = 0; i < moved_.size();) {
    Moved& m = moved_[i];
    const Server& s = servers_[m.server];
    // Below min_ops no server bursts, whatever its average.
    if (m.phase == Moved::Phase::kAway && now - m.since >= options_.hold &&
        s.recent < std::max(options_.end * s.long_run, options_.min_ops) &&
        (options_.queue == 0 || s.queued < options_.queue / 2)) {
      const std::string reason = StrCat(
          m.server, " demand ", Ops(s.recent), " ops/s < ", options_.end,
          " x long-run ", Ops(s.long_run), " ops/s after ",
          absl::FormatDuration(absl::Trunc(now - m.since, absl::Seconds(1))),
          " away");
      if (absl::Status st = BeginReclaim(m, reason); !st.ok()) {
        LogWarning("tail_latency: reclaiming ", m.flow, ": ", st.message(),
                   " (trying again)");
      }
    }
    if (m.phase == Moved::Phase::kReclaiming && StepReclaim(m)) {
      servers_[m.server].quiet_until = now + options_.cooldown;
      moved_.erase(moved_.begin() + i);
      Save();
      continue;
    }
    ++i;
  }
}

void TailLatency::OffLoadBursts(const Interval& in, absl::Time now) {
  const auto& names = in.names;
  const auto& flows = in.flows;
  // Bursts. A server that bursts, or whose flows are away, takes no
  // other's: it has no headroom whatever it served.
  auto by_rate_of = [&](const Server& s) {
    return s.long_run >= 0 && s.recent >= options_.min_ops &&
           s.recent > options_.alpha * s.long_run;
  };
  auto by_queue_of = [&](const Server& s) {
    return options_.queue > 0 && s.queued >= options_.queue;
  };
  std::set<std::string> busy;
  for (const std::string& name : names) {
    const Server& s = servers_[name];
    if (by_rate_of(s) || by_queue_of(s)) busy.insert(name);
  }
  for (const Moved& m : moved_) busy.insert(m.server);
  for (const std::string& name : names) {
    Server& s = servers_[name];
    const bool by_rate = by_rate_of(s);
    const bool by_queue = by_queue_of(s);
    if (now < s.quiet_until || (!by_rate && !by_queue)) continue;
    if (std::any_of(moved_.begin(), moved_.end(),
                    [&](const Moved& m) { return m.server == name; })) {
      continue;  // off-loaded already
    }
    std::vector<const Flow*> hot;
    for (const Flow& f : flows) {
      if (f.server == name && f.writes > 0) hot.push_back(&f);
    }
    std::sort(hot.begin(), hot.end(), [](const Flow* a, const Flow* b) {
      return a->writes > b->writes;
    });
    if (hot.size() > static_cast<size_t>(options_.flows)) {
      hot.resize(options_.flows);
    }
    for (const Flow* f : hot) {
      // Headroom: a target that serves well below the burst (below the
      // choked server's own rate when only its queue tells the burst); the
      // least loaded first, up to `spread` of them.
      std::vector<std::pair<double, std::string>> idle;
      for (const std::string& t : in.reach.at(f->sswitch)) {
        const double load = servers_[t].served;
        if (t != name && !busy.contains(t) &&
            load * (by_rate ? options_.alpha : 1) < s.recent) {
          idle.emplace_back(load, t);
        }
      }
      std::sort(idle.begin(), idle.end());
      if (idle.size() > static_cast<size_t>(options_.spread)) {
        idle.resize(options_.spread);
      }
      if (idle.empty()) {
        Note(StrCat(name, " bursts (", Ops(s.recent), " ops/s, long-run ",
                    Ops(s.long_run), ") but no other server has headroom"));
        s.quiet_until = now + options_.cooldown;
        break;
      }
      std::vector<std::string> targets, serves;
      for (const auto& [load, t] : idle) {
        targets.push_back(t);
        serves.push_back(StrCat(t, " serves ", Ops(load), " ops/s"));
      }
      const std::string reason = StrCat(
          name, " demand ", Ops(s.recent), by_rate ? " ops/s > " : " ops/s, ",
          by_rate ? StrCat(options_.alpha, " x long-run ") : "long-run ",
          Ops(s.long_run), " ops/s",
          by_queue ? StrCat(", ", s.queued, " IOs in flight") : "", "; ",
          absl::StrJoin(serves, ", "));
      // The next burst of this report sees these targets take this one.
      for (const std::string& t : targets) {
        servers_[t].served += f->writes / static_cast<double>(targets.size());
      }
      if (absl::Status st = OffLoad(*f, targets, reason); !st.ok()) {
        LogWarning("tail_latency: off-loading ", f->text, ": ", st.message());
        s.quiet_until = now + options_.cooldown;
      }
    }
  }
}

void TailLatency::UpdateLongRun(const Interval& in) {
  // The interval joins the long-run averages after the decisions (a burst
  // is judged against what came before it), except where flows are away.
  const double weight =
      std::min(1.0, in.secs / absl::ToDoubleSeconds(options_.window));
  for (const std::string& name : in.names) {
    Server& s = servers_[name];
    if (s.long_run >= 0 &&
        std::none_of(moved_.begin(), moved_.end(),
                     [&](const Moved& m) { return m.server == name; })) {
      s.long_run += (s.recent - s.long_run) * weight;
    }
  }
}

absl::Status TailLatency::ReplaceRule(const std::string& sswitch,
                                      const std::string& insert,
                                      const std::string& remove) {
  auto installed = api_->Rules(sswitch);
  if (!installed.ok()) return installed.status();
  RuleChanges changes{sswitch, {}, {}};
  if (!insert.empty()) changes.insert.push_back(insert);
  for (const proto::ManagedRule& r : *installed) {
    if (!remove.empty() && r.text() == remove)
      changes.remove.push_back(r.cid());
    // An earlier life made this change but stopped before saving it.
    if (!insert.empty() && r.text() == insert) changes.insert.clear();
  }
  if (changes.insert.empty() && changes.remove.empty()) {
    return absl::OkStatus();
  }
  UpdateSpec spec;
  spec.owner = kOwner;
  spec.changes.push_back(std::move(changes));
  return api_->Update(spec).status();
}

absl::Status TailLatency::OffLoad(const Flow& flow,
                                  const std::vector<std::string>& targets,
                                  const std::string& reason) {
  Moved m;
  m.sswitch = flow.sswitch;
  m.flow = flow.text;
  m.server = flow.server;
  m.targets = targets;
  std::vector<std::string> detours;
  for (const std::string& t : targets) {
    m.folders.push_back(StrCat("//", t, "/", kOffloadFolder, generation_ + 1));
    detours.push_back(
        StrCat("<IO, ", Into(m.folders.back(), flow.target), ">"));
  }
  const std::string prio = StrCat("@", flow.priority + 1, " ");
  m.away_rule = Canonical(StrCat(prio, flow.write_pattern, " -> track_writes(",
                                 targets.size() > 1 ? "spread" : "", "); ",
                                 absl::StrJoin(detours, ", ")));
  m.home_rule =
      Canonical(StrCat(prio, flow.write_pattern,
                       " -> track_writes(home); <IO, ", flow.target, ">"));
  m.since = Now();
  m.long_run = servers_[flow.server].long_run;
  ++generation_;
  Save();  // the generation is never used twice
  if (absl::Status s = ReplaceRule(m.sswitch, m.away_rule, ""); !s.ok()) {
    return s;
  }
  moved_.push_back(m);
  Save();
  Note(StrCat("off-load: ", reason, ": writes of ", flow.text, " on ",
              flow.sswitch, " go to ", absl::StrJoin(detours, ", ")));
  return absl::OkStatus();
}

absl::Status TailLatency::BeginReclaim(Moved& m, const std::string& reason) {
  if (absl::Status s = ReplaceRule(m.sswitch, m.home_rule, m.away_rule);
      !s.ok()) {
    return s;
  }
  m.phase = Moved::Phase::kReclaiming;
  m.reclaim_began = Now();
  Save();
  Note(StrCat("reclaim: ", reason, ": writes of ", m.flow, " on ", m.sswitch,
              " go home; the bytes in ", absl::StrJoin(m.folders, ", "),
              " follow"));
  return absl::OkStatus();
}

bool TailLatency::StepReclaim(Moved& m) {
  auto flow = ParseRule(m.flow);
  auto home = ParseRule(m.home_rule);
  if (!flow.ok() || !home.ok()) {
    LogError("tail_latency: the saved rules of ", m.flow, " do not parse");
    return true;
  }
  proto::Copy req;
  req.set_mode(proto::Copy::RECLAIM);
  req.set_from(flow->pattern.file.text);
  req.set_budget_ms(kReclaimStepMs);
  req.set_rate_bytes_per_s(options_.rate_bytes_per_s);
  req.set_chunk_bytes(options_.chunk_bytes);
  req.set_forget_anchor(FormatPattern(home->pattern));
  auto p = api_->Copy(m.sswitch, req);
  if (!p.ok()) {
    LogWarning("tail_latency: reclaiming ", m.flow, " on ", m.sswitch, ": ",
               p.status().message(), " (trying again)");
    return false;
  }
  if (m.reclaim_began == absl::InfinitePast()) {
    m.reclaim_began = Now();  // begun in an earlier life
  }
  m.reclaimed_bytes += p->bytes_written();
  LogInfo("tail_latency: reclaiming ", m.flow, ": ", p->bytes_written(),
          " bytes moved in this step, ", p->bytes(), " still away");
  if (!p->done()) return false;
  if (absl::Status s = ReplaceRule(m.sswitch, "", m.home_rule); !s.ok()) {
    LogWarning("tail_latency: removing ", m.home_rule, ": ", s.message(),
               " (trying again)");
    return false;
  }
  for (const std::string& folder : m.folders) {
    proto::Copy rm;
    rm.set_mode(proto::Copy::REMOVE);
    rm.set_from(folder);
    if (auto r = api_->Copy(m.sswitch, rm); !r.ok()) {
      LogWarning("tail_latency: removing ", folder, ": ", r.status().message(),
                 " (no rule reads it any more)");
    }
  }
  const double secs = absl::ToDoubleSeconds(Now() - m.reclaim_began);
  Note(StrCat(
      "reclaimed: every byte of ", m.flow, " on ", m.sswitch, " is home (",
      absl::StrFormat("%.1f", m.reclaimed_bytes / 1e6), " MB moved in ",
      absl::StrFormat("%.1f", secs), " s, ",
      absl::StrFormat("%.2f", m.reclaimed_bytes / 1e6 / std::max(secs, 1e-3)),
      " MB/s); ", absl::StrJoin(m.folders, ", "), " removed"));
  return true;
}

namespace {

ControlAppRegistration tail_latency_app(
    "tail_latency",
    [](const std::string& args) -> absl::StatusOr<std::unique_ptr<ControlApp>> {
      auto o = ParseTailLatencyArgs(args);
      if (!o.ok()) return o.status();
      return std::make_unique<TailLatency>(*std::move(o));
    });

}  // namespace
}  // namespace sroute

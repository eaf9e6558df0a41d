// SPDX-License-Identifier: Apache-2.0
#include "sim/apps.h"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

#include "controller/app_api.h"
#include "sim/engine.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute::sim {
namespace {

uint64_t Nanos(absl::Duration d) {
  return static_cast<uint64_t>(
      std::max<int64_t>(1, absl::ToInt64Nanoseconds(d)));
}

uint64_t PercentileUs(std::vector<uint64_t>& ns, double p) {
  if (ns.empty()) return 0;
  const size_t i =
      std::min(ns.size() - 1,
               static_cast<size_t>(p / 100 * static_cast<double>(ns.size())));
  std::nth_element(ns.begin(), ns.begin() + static_cast<long>(i), ns.end());
  return ns[i] / 1000;
}

// One rule's counts on one host, as its sSwitch keeps them.
struct Counts {
  uint64_t reads = 0, writes = 0, read_bytes = 0, write_bytes = 0;
  uint64_t total_reads = 0, total_writes = 0;
  uint64_t total_read_bytes = 0, total_write_bytes = 0;
  uint64_t arrived = 0, ended = 0;
  std::vector<uint64_t> latencies_ns;  // of the IOs ended in the interval
};

class SimController : public ControllerApi {
 public:
  SimController(const Layout& layout, const std::vector<Request>& requests,
                const std::vector<uint64_t>& start_ns,
                const std::vector<uint64_t>& end_ns,
                const std::vector<RuleChange>& routed_by,
                const std::vector<AwayEvent>& away, const CopyLog& copies)
      : layout_(layout),
        requests_(requests),
        start_ns_(start_ns),
        end_ns_(end_ns),
        routed_by_(routed_by),
        copies_(copies),
        away_(away),
        duration_ns_(static_cast<uint64_t>(layout.scenario.duration_s() * 1e9)),
        interval_ns_(
            static_cast<uint64_t>((layout.scenario.stats_interval_s() == 0
                                       ? 1.0
                                       : layout.scenario.stats_interval_s()) *
                                  1e9)),
        rules_(layout.hosts.size(), layout.rules),
        counts_(layout.hosts.size()),
        by_start_(requests.size()),
        by_end_(requests.size()) {
    for (const SimRule& r : layout.rules) {
      texts_[r.cid] = {r.text, r.owner};
      next_cid_ = std::max(next_cid_, r.cid + 1);
    }
    for (uint32_t h = 0; h < layout.hosts.size(); ++h) {
      host_of_[layout.hosts[h]] = h;
    }
    std::iota(by_start_.begin(), by_start_.end(), size_t{0});
    if (!start_ns.empty()) {
      std::stable_sort(
          by_start_.begin(), by_start_.end(),
          [&](size_t a, size_t b) { return start_ns[a] < start_ns[b]; });
    }
    std::iota(by_end_.begin(), by_end_.end(), size_t{0});
    std::stable_sort(by_end_.begin(), by_end_.end(),
                     [&](size_t a, size_t b) { return end_ns[a] < end_ns[b]; });
  }

  absl::StatusOr<AppReplay> Run() {
    const proto::SimScenario& s = layout_.scenario;
    for (int a = 0; a < s.apps_size(); ++a) {
      App app;
      auto made = ControlAppRegistry::Global().Create(s.apps(a), &app.name);
      if (!made.ok()) {
        return absl::InvalidArgumentError(
            StrCat("apps[", a, "]: ", made.status().message()));
      }
      app.app = *std::move(made);
      apps_.push_back(std::move(app));
    }
    absl::Status start_error;
    engine_.At(0, [&] {
      for (size_t a = 0; a < apps_.size(); ++a) {
        current_ = a;
        if (absl::Status st = apps_[a].app->Start(*this); !st.ok()) {
          start_error = absl::InvalidArgumentError(
              StrCat("apps[", a, "]: ", apps_[a].name, ": ", st.message()));
          engine_.Stop();
          return;
        }
      }
    });
    engine_.Every(
        interval_ns_, [this] { Tick(); }, duration_ns_);
    engine_.Run(duration_ns_);
    if (!start_error.ok()) return start_error;
    AppReplay out;
    out.settled = !diverged_ && timeline_.size() == routed_by_.size();
    out.timeline = std::move(timeline_);
    for (App& app : apps_) {
      auto it = app.state.find("decisions");
      if (it == app.state.end()) continue;
      for (std::string_view line : StrSplit(it->second, '\n')) {
        if (!line.empty()) out.notes.push_back(StrCat(app.name, ": ", line));
      }
    }
    return out;
  }

  // ControllerApi.
  std::vector<TopologyHost> Topology() override {
    std::vector<TopologyHost> out;
    for (uint32_t h = 0; h < layout_.hosts.size(); ++h) {
      TopologyHost t;
      t.info.set_sswitch(layout_.hosts[h]);
      t.info.set_role("fuse");
      for (const Layout::Server& server : layout_.servers) {
        proto::EndpointInfo* e = t.info.add_endpoints();
        e->set_name(server.name);
        e->set_kind("server");
      }
      t.connected = true;
      t.version = version_;
      out.push_back(std::move(t));
    }
    return out;
  }

  absl::StatusOr<std::vector<proto::ManagedRule>> Rules(
      const std::string& sswitch) override {
    auto h = host_of_.find(sswitch);
    if (h == host_of_.end()) return NoHost(sswitch);
    std::vector<proto::ManagedRule> out;
    for (const SimRule& r : rules_[h->second]) {
      proto::ManagedRule m;
      m.set_cid(r.cid);
      m.set_text(r.text);
      m.set_owner(r.owner);
      out.push_back(std::move(m));
    }
    return out;
  }

  absl::StatusOr<UpdateOutcome> Update(const UpdateSpec& spec) override {
    const std::string owner =
        spec.owner.empty() ? apps_[current_].name : spec.owner;
    // Checked whole before anything changes, as the controller does.
    for (const RuleChanges& c : spec.changes) {
      auto h = host_of_.find(c.sswitch);
      if (h == host_of_.end()) return NoHost(c.sswitch);
      for (const RuleToInsert& in : c.insert) {
        if (auto r = in.Read(); !r.ok()) {
          return absl::InvalidArgumentError(
              StrCat(in.Text(), ": ", r.status().message()));
        }
      }
      for (uint64_t cid : c.remove) {
        const auto& rules = rules_[h->second];
        if (std::none_of(rules.begin(), rules.end(),
                         [&](const SimRule& r) { return r.cid == cid; })) {
          return absl::NotFoundError(
              StrCat("no rule ", cid, " on ", c.sswitch));
        }
      }
    }
    UpdateOutcome out;
    for (const RuleChanges& c : spec.changes) {
      RuleChange change;
      change.at_ns = engine_.now_ns();
      change.host = host_of_[c.sswitch];
      change.app = apps_[current_].name;
      change.remove = c.remove;
      for (const RuleToInsert& in : c.insert) {
        const std::string text = in.Text();
        const uint64_t cid = next_cid_++;
        change.insert.push_back({cid, text, owner, apps_[current_].name});
        texts_[cid] = {text, owner};
        out.cids.push_back(cid);
      }
      std::vector<SimRule>& rules = rules_[change.host];
      std::erase_if(rules, [&](const SimRule& r) {
        return std::find(c.remove.begin(), c.remove.end(), r.cid) !=
               c.remove.end();
      });
      rules.insert(rules.end(), change.insert.begin(), change.insert.end());
      Record(std::move(change));
    }
    out.version = ++version_;
    return out;
  }

  absl::Status Quiesce(const std::string&, const std::string&, bool) override {
    return absl::OkStatus();
  }
  absl::Status Drain(const std::string&, const std::string&,
                     absl::Duration) override {
    return absl::OkStatus();
  }
  StatsSnapshot Stats() override { return last_; }
  absl::StatusOr<std::vector<proto::StageStats>> Stages(
      const std::string&, const proto::Stages&) override {
    return absl::UnimplementedError("sroute-sim does not simulate stages yet");
  }
  absl::StatusOr<std::vector<proto::DeviceProfile>> SetProfiles(
      const std::string&, const proto::SetProfiles&) override {
    return absl::UnimplementedError(
        "sroute-sim does not simulate device profiles yet");
  }

  // A reclaim copies what is away home. Its first call starts it (a change
  // of the timeline: the next pass copies it as IO, a chunk at a time,
  // read where it is, then written through the host's rules); each call
  // reports what the pass's copy had moved by then, and it is done when
  // the copy's last write has ended. In a pass that was not routed with
  // this start, the copy is credited at its rate between one call and the
  // next, at most `budget_ms` of it (virtual time does not pass within a
  // callback).
  absl::StatusOr<proto::CopyProgress> Copy(const std::string& sswitch,
                                           const proto::Copy& req) override {
    auto h = host_of_.find(sswitch);
    if (h == host_of_.end()) return NoHost(sswitch);
    proto::CopyProgress p;
    if (req.mode() == proto::Copy::REMOVE) {
      p.set_done(true);
      p.set_removed(1);
      return p;
    }
    if (req.mode() != proto::Copy::RECLAIM) {
      return absl::UnimplementedError(
          "sroute-sim simulates only the copies of a reclaim (RECLAIM, "
          "REMOVE)");
    }
    const uint64_t now = engine_.now_ns();
    const auto key = std::make_pair(h->second, req.from());
    auto [it, begun] = reclaims_.try_emplace(key, Reclaim{now, 0, 0});
    Reclaim& rc = it->second;
    if (begun) {
      RuleChange change;
      change.at_ns = now;
      change.host = h->second;
      change.app = apps_[current_].name;
      change.reclaiming = req.from();
      change.rate_bytes_per_s = req.rate_bytes_per_s();
      change.chunk_bytes = req.chunk_bytes();
      rc.start = timeline_.size();
      Record(std::move(change));
    }
    uint64_t moved = 0, left = 0;
    bool done = false;
    if (auto copy = copies_.find(rc.start);
        copy != copies_.end() && !diverged_) {
      // The pass copied it (it was routed with this start).
      for (const auto& [end, bytes] : copy->second.writes) {
        if (end <= now) moved += bytes;
      }
      left =
          copy->second.total_bytes - std::min(moved, copy->second.total_bytes);
      done = copy->second.complete && left == 0;
    } else {
      const uint64_t away = AwayBytes(h->second, req.from());
      const uint64_t still = away > rc.moved ? away - rc.moved : 0;
      const double secs = std::min(static_cast<double>(now - rc.last_ns) * 1e-9,
                                   req.budget_ms() * 1e-3);
      const uint64_t step =
          req.rate_bytes_per_s() == 0
              ? still
              : std::min<uint64_t>(
                    still,
                    static_cast<uint64_t>(
                        static_cast<double>(req.rate_bytes_per_s()) * secs));
      moved = rc.moved + step;
      left = still - step;
      done = left == 0;
    }
    p.set_bytes_written(moved - std::min(moved, rc.moved));
    p.set_bytes(left);
    rc.moved = std::max(rc.moved, moved);
    rc.last_ns = now;
    if (done) {
      p.set_done(true);
      reclaims_.erase(key);
      reclaimed_at_[key] = now;
      RuleChange change;
      change.at_ns = now;
      change.host = h->second;
      change.app = apps_[current_].name;
      change.reclaimed = req.from();
      Record(std::move(change));
    }
    return p;
  }

  void AddTimer(absl::Duration period, std::function<void()> fn) override {
    const size_t app = current_;
    engine_.Every(
        Nanos(period),
        [this, app, fn = std::move(fn)] {
          current_ = app;
          fn();
        },
        duration_ns_);
  }
  void Post(std::function<void()> fn) override {
    const size_t app = current_;
    engine_.At(engine_.now_ns(), [this, app, fn = std::move(fn)] {
      current_ = app;
      fn();
    });
  }
  absl::Status PutState(const std::string& key,
                        const std::string& value) override {
    apps_[current_].state[key] = value;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> GetState(const std::string& key) override {
    auto it = apps_[current_].state.find(key);
    if (it == apps_[current_].state.end()) {
      return absl::NotFoundError(StrCat("no state ", key));
    }
    return it->second;
  }
  absl::Time Now() override {
    return absl::UnixEpoch() +
           absl::Nanoseconds(static_cast<int64_t>(engine_.now_ns()));
  }

 private:
  struct App {
    std::string name;
    std::unique_ptr<ControlApp> app;
    std::map<std::string, std::string> state;
  };

  static absl::Status NoHost(const std::string& sswitch) {
    return absl::NotFoundError(StrCat("no host ", sswitch, " in the scenario"));
  }

  // Keeps a change; the first that differs from the pass's ends the replay.
  void Record(RuleChange change) {
    const size_t i = timeline_.size();
    timeline_.push_back(std::move(change));
    if (i >= routed_by_.size() || !(routed_by_[i] == timeline_[i])) {
      diverged_ = true;
      engine_.Stop();
    }
  }

  // The bytes of `host`'s files named `from...` that writes took away by
  // now and neither brought home nor a reclaim moved.
  uint64_t AwayBytes(uint32_t host, const std::string& from) const {
    const auto cleared = reclaimed_at_.find(std::make_pair(host, from));
    std::map<std::pair<std::string, uint64_t>, bool> pages;
    for (const AwayEvent& e : away_) {
      if (e.at_ns > engine_.now_ns()) break;
      if (e.host != host || !e.file.starts_with(from)) continue;
      if (cleared != reclaimed_at_.end() && e.at_ns <= cleared->second) {
        continue;
      }
      pages[{e.file, e.page}] = e.away;
    }
    uint64_t n = 0;
    for (const auto& [page, is_away] : pages) n += is_away ? 1 : 0;
    return n * kSimPageBytes;
  }

  // The hosts' reports of the interval that ends now, then the apps'
  // OnStats.
  void Tick() {
    const uint64_t now = engine_.now_ns();
    for (; next_arrival_ < by_start_.size() &&
           StartOf(by_start_[next_arrival_]) <= now;
         ++next_arrival_) {
      const Request& r = requests_[by_start_[next_arrival_]];
      if (r.rule == 0) continue;
      Counts& c = counts_[r.host][r.rule];
      ++c.arrived;
      (r.read ? c.reads : c.writes) += 1;
      (r.read ? c.total_reads : c.total_writes) += 1;
      (r.read ? c.read_bytes : c.write_bytes) += r.bytes;
      (r.read ? c.total_read_bytes : c.total_write_bytes) += r.bytes;
    }
    for (; next_end_ < by_end_.size() && end_ns_[by_end_[next_end_]] <= now;
         ++next_end_) {
      const size_t i = by_end_[next_end_];
      const Request& r = requests_[i];
      if (r.rule == 0) continue;
      Counts& c = counts_[r.host][r.rule];
      ++c.ended;
      c.latencies_ns.push_back(end_ns_[i] - std::min(end_ns_[i], StartOf(i)));
    }
    StatsSnapshot snap;
    snap.at = Now();
    for (uint32_t h = 0; h < layout_.hosts.size(); ++h) {
      HostStats hs;
      hs.sswitch = layout_.hosts[h];
      hs.connected = true;
      hs.version = version_;
      hs.interval = absl::Nanoseconds(static_cast<int64_t>(interval_ns_));
      for (auto& [cid, c] : counts_[h]) {
        const int64_t in_flight = static_cast<int64_t>(c.arrived - c.ended);
        hs.in_flight += in_flight;
        if (c.reads + c.writes == 0 && in_flight == 0) continue;
        RuleStats rs;
        rs.cid = cid;
        rs.host_id = cid;
        const auto& [text, owner] = texts_[cid];
        rs.text = text;
        rs.owner = owner;
        rs.reads = c.reads;
        rs.writes = c.writes;
        rs.read_bytes = c.read_bytes;
        rs.write_bytes = c.write_bytes;
        rs.total_reads = c.total_reads;
        rs.total_writes = c.total_writes;
        rs.total_read_bytes = c.total_read_bytes;
        rs.total_write_bytes = c.total_write_bytes;
        rs.in_flight = in_flight;
        rs.p50_us = PercentileUs(c.latencies_ns, 50);
        rs.p99_us = PercentileUs(c.latencies_ns, 99);
        hs.rules.push_back(std::move(rs));
        c.reads = c.writes = c.read_bytes = c.write_bytes = 0;
        c.latencies_ns.clear();
      }
      snap.hosts.push_back(std::move(hs));
    }
    last_ = snap;
    for (size_t a = 0; a < apps_.size() && !diverged_; ++a) {
      current_ = a;
      apps_[a].app->OnStats(last_);
    }
  }

  const Layout& layout_;
  // When the sSwitch saw request i: when its host started it.
  uint64_t StartOf(size_t i) const {
    return start_ns_.empty() ? requests_[i].arrival_ns : start_ns_[i];
  }

  const std::vector<Request>& requests_;
  const std::vector<uint64_t>& start_ns_;
  const std::vector<uint64_t>& end_ns_;
  const std::vector<RuleChange>& routed_by_;
  const CopyLog& copies_;
  const std::vector<AwayEvent>& away_;
  const uint64_t duration_ns_, interval_ns_;

  Engine engine_;
  std::vector<App> apps_;
  size_t current_ = 0;  // the app whose callback runs
  std::map<std::string, uint32_t> host_of_;
  std::vector<std::vector<SimRule>> rules_;                        // per host
  std::map<uint64_t, std::pair<std::string, std::string>> texts_;  // cid ->
  uint64_t next_cid_ = 1;
  uint64_t version_ = 1;
  std::vector<RuleChange> timeline_;
  bool diverged_ = false;
  // Reclaims under way and when each ended, by host and files.
  struct Reclaim {
    uint64_t last_ns;  // the last call
    uint64_t moved;    // bytes
    size_t start;      // its start's place in the timeline
  };
  std::map<std::pair<uint32_t, std::string>, Reclaim> reclaims_;
  std::map<std::pair<uint32_t, std::string>, uint64_t> reclaimed_at_;

  std::vector<std::map<uint64_t, Counts>> counts_;  // per host, per cid
  std::vector<size_t> by_start_;  // requests by when their host started them
  std::vector<size_t> by_end_;    // requests by their end
  size_t next_arrival_ = 0, next_end_ = 0;
  StatsSnapshot last_;
};

}  // namespace

absl::StatusOr<AppReplay> ReplayApps(const Layout& layout,
                                     const std::vector<Request>& requests,
                                     const std::vector<uint64_t>& start_ns,
                                     const std::vector<uint64_t>& end_ns,
                                     const std::vector<RuleChange>& routed_by,
                                     const std::vector<AwayEvent>& away,
                                     const CopyLog& copies) {
  SimController controller(layout, requests, start_ns, end_ns, routed_by, away,
                           copies);
  // The apps note each decision in the log, pass after pass: only their
  // warnings are shown.
  SetLogLeastSeverity("W");
  absl::StatusOr<AppReplay> replay = controller.Run();
  SetLogLeastSeverity("I");
  return replay;
}

}  // namespace sroute::sim

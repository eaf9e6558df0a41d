// SPDX-License-Identifier: Apache-2.0
// steer_policies: the read-steering policies of issue 49 side by side on a
// heterogeneous pool of emulated flash devices, through the real data path
// (a EmbeddedHost, a replica_set stage over FlashEndpoints, each device's
// congestion watch). For each policy the offered load rises in steps of
// 10 % (open loop: Poisson arrivals planned ahead, latency counted from
// each request's planned arrival, in model time) until the p90 passes the
// target; the table gives the highest load that kept it, and the ideal
// the devices' profiles allow (each device loaded to its own capacity).
//
//   steer_policies [policies=fds,reflex,gimbal,sandook]
//                  [presets=worn,healthy,healthy,fast] [dilation=50]
//                  [write_percent=0] [target_us=1000] [step_s=2]
//                  [warmup_s=1] [start=0.3] [threads=256] [threshold=25]
//                  [max_baseline=100]
//                  [zipf=0.99] [profiles=route|model] [segregate=0|1]
//                  [epoch_ms=200] [profile_dir=DIR] [floor=PCT]
//                  [refine=1] [derate=1]
//                  [drill=gc load=0.6 drill_s=8 gc_at_s=2.5 gc_s=2
//                   gc_member=3 drill_out=DIR]
//                  [drill=segregation load=0.6 write_steps=2,5,10,20,30]
//                  [spell_s=0]
//
// Every member holds every byte (the replica set writes each change to
// all of them): a write loads every device. Policies (ReplicaSetOptions
// .steer): fds (a region's reads to one member by hash), reflex (weights
// by peak IOPS), gimbal (even weights times AIMD on congestion marks),
// sandook (the steering app's plan at the offered load, times AIMD), plan
// (sandook without congestion marks: the plan alone). spell_s=S: in every
// step of the ramp a member collects for S seconds, a third into the
// measured span, the members in turn (FlashEndpoint::HoldForGc: devices
// that do not keep their profiles, as in a rack; the ideal is still the
// profiles'); the log then counts the requests over the target, reads
// and writes, outside spells and in spells on read-mode and on
// write-taking members. The
// profiles are the presets' model profiles, dilated.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_join.h"
#include "controller/apps/steering.h"
#include "embed/embedded_host.h"
#include "endpoints/flash_endpoint.h"
#include "endpoints/flash_profile.h"
#include "google/protobuf/text_format.h"
#include "stages/stage.h"
#include "stages/steering/sweep.h"
#include "stages/steering/watch.h"
#include "tests/util/temp_dir.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "util/strings.h"
#include "util/zipfian.h"

namespace sroute {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kFilePages = 4096;  // 16 MiB on each device

struct Options {
  std::vector<std::string> policies = {"fds", "reflex", "gimbal", "sandook"};
  std::vector<std::string> presets = {"worn", "healthy", "healthy", "fast"};
  double dilation = 50;
  double write_fraction = 0;
  double target_us = 1000;  // model time
  double step_s = 2, warmup_s = 1;
  double start = 0.3;  // of the ideal
  // Each client thread issues its requests in turn: a request stuck behind
  // a GC spell (150 ms of wall time and more) makes the thread's next ones
  // late. With 64 threads that head-of-line blocking, not the devices,
  // decided the spell runs; 256 keep the arrivals open-loop.
  int threads = 256;
  uint32_t threshold = 25;
  uint32_t max_baseline = 100;      // percent: the watches' calm ratio at most
  double zipf = 0.99;               // 0: uniform addresses
  bool route_profiles = true;       // profiles=route|model
  bool segregate = false;           // placement=anywhere, copies=2
  double epoch_ms = 200;            // segregated: the window slides (0: fixed)
  uint32_t aimd_floor_percent = 0;  // 0: the stage's default
  bool refine = true;               // refine=0: steps of 10 % only
  bool derate = true;  // derate=0: sandook's plan ignores the multipliers
  // drill=segregation: write percents, one step each, the reads at `load`
  // of the reads-only ideal.
  std::vector<double> write_steps;
  // drill=gc: a GC spell under a constant load (RunGcDrill).
  bool gc_drill = false;
  double load = 0.6;  // of the ideal
  double drill_s = 8, gc_at_s = 2.5, gc_s = 2;
  size_t gc_member = 3;
  // The ramp with GC spells: in each step's measured span, a third into
  // it, the next member in turn collects for spell_s (0: none).
  double spell_s = 0;
  std::string drill_out;  // a directory for gc-POLICY.dat (gnuplot)
};

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  for (std::string_view p : StrSplit(s, ',')) {
    if (!p.empty()) out.emplace_back(p);
  }
  return out;
}

std::string& ProfileDir() {
  static std::string dir;
  return dir;
}

// The presets' model profiles, dilated (made once each).
// Each preset's profile: its model's, dilated (`route` false), or (what a
// deployment does, `route`) swept through a host's sSwitch on a fresh
// device of that preset, warmed as the benchmark's are: the machine's own
// noise (timers, scheduling) is then in it, as a real device's software
// would be. Made once each.
std::shared_ptr<const Profile> ProfileOf(const std::string& preset,
                                         double dilation, bool route) {
  static std::map<std::string, std::shared_ptr<const Profile>> made;
  const std::string key = preset + (route ? "/route" : "/model");
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  proto::DeviceProfile measured;
  // profile_dir=DIR: a route profile measured once is kept there (a run of
  // several configurations on the same pool measures each preset once).
  const std::string kept =
      ProfileDir().empty()
          ? ""
          : StrCat(ProfileDir(), "/", preset, "-", dilation, ".textproto");
  if (route && !kept.empty() && std::filesystem::exists(kept)) {
    std::ifstream in(kept);
    std::stringstream text;
    text << in.rdbuf();
    if (!google::protobuf::TextFormat::ParseFromString(text.str(), &measured)) {
      std::cerr << "steer_policies: cannot parse " << kept << "\n";
      std::exit(1);
    }
  } else if (route) {
    testing::TempDir dir;
    EmbeddedHost host("profiler");
    FlashEndpoint::Options eo;
    eo.model = *FlashModel::Preset(preset);
    eo.dilation = dilation;
    auto e = FlashEndpoint::Open(dir.path(), eo);
    if (!e.ok() || !(*e)->Warm("data", kFilePages * kPage, 1.0, 99).ok()) {
      std::cerr << "steer_policies: cannot make a " << preset << " device\n";
      std::exit(1);
    }
    (void)host.AddEndpoint("D", *e);
    proto::ProfileEndpoint req;
    req.set_endpoint("D");
    for (uint32_t w : {0u, 10u, 20u, 30u, 50u, 100u}) {
      req.add_write_percent(w);
    }
    req.set_step_percent(5);
    req.set_step_ms(300);
    req.set_warmup_ms(100);
    req.set_size_bytes(16 << 20);
    proto::ProfileProgress progress;
    do {
      progress.Clear();
      if (absl::Status s = ProfileSweep(host.sswitch(), req, &progress);
          !s.ok()) {
        std::cerr << "steer_policies: profiling " << preset << ": " << s
                  << "\n";
        std::exit(1);
      }
      *req.mutable_so_far() = progress.profile();
      std::fprintf(stderr, "profile %s: %u/%u steps\n", preset.c_str(),
                   progress.steps_done(), progress.steps_total());
    } while (!progress.done());
    measured = progress.profile();
    if (!kept.empty()) {
      std::string text;
      google::protobuf::TextFormat::PrintToString(measured, &text);
      std::ofstream(kept) << text;
    }
  } else {
    ModelSweep sweep;
    sweep.step_percent = 2;
    sweep.ios_per_step = 3000;
    measured = DilateProfile(ProfileModel(*FlashModel::Preset(preset), sweep),
                             dilation);
  }
  auto p = Profile::Make(measured);
  if (!p.ok()) {
    std::cerr << "steer_policies: " << p.status() << "\n";
    std::exit(1);
  }
  auto shared = std::make_shared<const Profile>(*std::move(p));
  made[key] = shared;
  return shared;
}

// The most client requests per second (reads and writes, wall time) the
// devices serve with every device within the target: each write lands on
// every device, the reads split as they may.
double Ideal(const std::vector<std::shared_ptr<const Profile>>& profiles,
             const Options& o) {
  auto fits = [&](double x) {
    const double writes = x * o.write_fraction;
    const double reads = x - writes;
    if (o.segregate) {
      // Each write on two devices, anywhere: the devices' capacity at the
      // pool's mix covers the reads and twice the writes.
      const double device_load = reads + 2 * writes;
      const double mix = device_load > 0 ? 2 * writes / device_load : 0;
      double capacity = 0;
      for (const auto& p : profiles) {
        capacity +=
            p->Capacity(mix, o.target_us * o.dilation, Percentile::kP90);
      }
      return capacity >= device_load;
    }
    double room = 0;
    for (const auto& p : profiles) {
      const double all = reads / profiles.size() + writes;
      const double mix = all > 0 ? writes / all : 0;
      room += std::max(
          0.0, p->Capacity(mix, o.target_us * o.dilation, Percentile::kP90) -
                   writes);
    }
    return room >= reads;
  };
  double lo = 0, hi = 1e7;
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

struct Step {
  double offered = 0, served = 0;  // requests/s, wall
  double p50_us = 0, p90_us = 0;   // model time
  // Requests measured and those over the target, by kind (read, write) and
  // by when they were planned: no spell, a spell on a member that takes
  // reads only, a spell on a member in the write-mode window
  // (spell_s; without spells every request is in the first column).
  uint64_t count[2][3] = {}, slow[2][3] = {};
};

// spell_s: the spell under way when a request is planned (0 none, 1 on
// a read-mode member, 2 on a member that takes writes).
std::atomic<int>& SpellNow() {
  static std::atomic<int> now{0};
  return now;
}

// A request measured: when it was done (ns after the measured span began)
// and its latency (model us).
struct Done {
  uint64_t at_ns;
  double latency_us;
};

// `measured_from` (if not null): when the measured span began;
// `timeline` (if not null): every request measured.
Step RunStep(EmbeddedHost& host, double rate, const Options& o, uint64_t seed,
             double step_s, uint64_t* measured_from = nullptr,
             std::vector<Done>* timeline = nullptr) {
  const Zipfian zipf(kFilePages, o.zipf);
  const uint64_t begin = MonotonicNanos();
  const uint64_t measure_from = begin + static_cast<uint64_t>(o.warmup_s * 1e9);
  const uint64_t end = measure_from + static_cast<uint64_t>(step_s * 1e9);
  if (measured_from != nullptr) *measured_from = measure_from;
  Mutex mu;
  std::vector<double> latencies;
  std::vector<Done> all_done;
  uint64_t served = 0;
  Step s;
  std::vector<std::thread> clients;
  for (int t = 0; t < o.threads; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937_64 rng(seed * 1000 + t);
      std::exponential_distribution<double> gap(rate / o.threads);
      std::vector<char> buf(kPage);
      std::vector<double> mine;
      std::vector<Done> mine_done;
      uint64_t done = 0;
      uint64_t count[2][3] = {}, slow[2][3] = {};
      double due = static_cast<double>(begin);
      for (;;) {
        due += gap(rng) * 1e9;
        const uint64_t planned = static_cast<uint64_t>(due);
        if (planned >= end) break;
        if (const uint64_t now = MonotonicNanos(); planned > now) {
          std::this_thread::sleep_for(std::chrono::nanoseconds(planned - now));
        }
        const uint64_t key = zipf.Key(rng);
        const bool write = std::uniform_real_distribution<double>(0, 1)(rng) <
                           o.write_fraction;
        const int spell = SpellNow().load(std::memory_order_relaxed);
        if (write) {
          (void)host.Write("t", "//home/data", key * kPage,
                           std::span<const char>(buf.data(), kPage));
        } else {
          (void)host.Read("t", "//home/data", key * kPage,
                          std::span<char>(buf.data(), kPage));
        }
        const uint64_t now = MonotonicNanos();
        if (planned >= measure_from) {
          mine.push_back(static_cast<double>(now - planned) / 1e3 / o.dilation);
          ++count[write][spell];
          if (mine.back() > o.target_us) ++slow[write][spell];
          if (timeline != nullptr) {
            mine_done.push_back({now - measure_from, mine.back()});
          }
          if (now < end) ++done;
        }
      }
      MutexLock l(&mu);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
      all_done.insert(all_done.end(), mine_done.begin(), mine_done.end());
      served += done;
      for (int w = 0; w < 2; ++w) {
        for (int k = 0; k < 3; ++k) {
          s.count[w][k] += count[w][k];
          s.slow[w][k] += slow[w][k];
        }
      }
    });
  }
  for (std::thread& c : clients) c.join();
  std::sort(latencies.begin(), latencies.end());
  s.offered = rate;
  s.served = static_cast<double>(served) / step_s;
  if (timeline != nullptr) *timeline = std::move(all_done);
  if (!latencies.empty()) {
    s.p50_us = latencies[latencies.size() / 2];
    s.p90_us = latencies[latencies.size() * 9 / 10];
  }
  return s;
}

struct PolicyResult {
  double max_rate = 0;  // wall requests/s within the target
  std::vector<Step> steps;
};

// drill=gc: a constant load (`load` of the ideal) for `drill_s`; at
// `gc_at_s` member `gc_member` collects for `gc_s` (a GC spell: every die
// busy copying pages). Per 100 ms: the p90 of the requests done in it, the
// share of the reads the collecting member served and its AIMD
// multiplier; then the share before, during (from two epochs of 200 ms
// after the start) and after, and when it was first cut to half.
void RunGcDrill(const std::string& policy, EmbeddedHost& host, HostStage& stage,
                const std::vector<std::shared_ptr<FlashEndpoint>>& endpoints,
                const std::vector<std::string>& members, double rate,
                const Options& o) {
  constexpr uint64_t kBinNs = 100'000'000;
  const std::string gc_name = members[o.gc_member];
  struct Sample {
    uint64_t at_ns;
    int64_t member_reads, all_reads, aimd_permille;
  };
  std::vector<Sample> samples;
  std::atomic<bool> done{false};
  std::atomic<uint64_t> measured_from{0};
  std::thread monitor([&] {
    bool held = false;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      const uint64_t from = measured_from.load();
      if (from == 0) continue;
      const uint64_t now = MonotonicNanos();
      if (now < from) continue;
      if (!held && now - from >= static_cast<uint64_t>(o.gc_at_s * 1e9)) {
        endpoints[o.gc_member]->HoldForGc(
            static_cast<uint64_t>(o.gc_s * 1e9 / o.dilation));
        held = true;
      }
      {
        proto::StageStats stats;
        stage.Report(&stats);
        auto c = [&](const std::string& k) {
          auto it = stats.counters().find(k);
          return it == stats.counters().end() ? int64_t{0} : it->second;
        };
        int64_t all = 0;
        for (const std::string& m : members) all += c("member." + m + ".reads");
        samples.push_back({now - from, c("member." + gc_name + ".reads"), all,
                           c("member." + gc_name + ".aimd_permille")});
      }
    }
  });
  std::vector<Done> timeline;
  // The monitor's clock starts where RunStep's measured span does (within
  // microseconds; bins are 100 ms).
  measured_from.store(MonotonicNanos() +
                      static_cast<uint64_t>(o.warmup_s * 1e9));
  (void)RunStep(host, rate, o, 7, o.drill_s, nullptr, &timeline);
  done.store(true);
  monitor.join();
  // Per bin: p90 of what was done in it; the member's share of the reads.
  const size_t bins = static_cast<size_t>(o.drill_s * 1e9 / kBinNs);
  std::vector<std::vector<double>> in_bin(bins);
  for (const Done& d : timeline) {
    const size_t b = d.at_ns / kBinNs;
    if (b < bins) in_bin[b].push_back(d.latency_us);
  }
  std::FILE* dat = nullptr;
  if (!o.drill_out.empty()) {
    dat = std::fopen(StrCat(o.drill_out, "/gc-", policy, ".dat").c_str(), "w");
    if (dat != nullptr) {
      std::fprintf(dat, "# t_s p90_us share_of_reads aimd\n");
    }
  }
  const double gc_from = o.gc_at_s, gc_to = o.gc_at_s + o.gc_s;
  const double epoch_s = 0.2;
  double before = 0, during = 0, after = 0;
  int n_before = 0, n_during = 0, n_after = 0;
  double cut_at = -1;
  double share_before = 0;
  for (size_t b = 0; b < bins; ++b) {
    std::sort(in_bin[b].begin(), in_bin[b].end());
    const double p90 =
        in_bin[b].empty() ? 0 : in_bin[b][in_bin[b].size() * 9 / 10];
    const double t = static_cast<double>(b) * kBinNs / 1e9;
    // The share: reads between the samples that bracket the bin.
    double share = 0;
    int64_t aimd = 1000;
    const Sample* lo = nullptr;
    const Sample* hi = nullptr;
    for (const Sample& smp : samples) {
      if (smp.at_ns <= b * kBinNs) lo = &smp;
      if (hi == nullptr && smp.at_ns >= (b + 1) * kBinNs) hi = &smp;
    }
    if (lo != nullptr && hi != nullptr && hi->all_reads > lo->all_reads) {
      share = static_cast<double>(hi->member_reads - lo->member_reads) /
              static_cast<double>(hi->all_reads - lo->all_reads);
      aimd = hi->aimd_permille;
    }
    if (t + 0.1 <= gc_from) {
      before += share;
      ++n_before;
    } else if (t >= gc_from + 2 * epoch_s && t + 0.1 <= gc_to) {
      during += share;
      ++n_during;
    } else if (t >= gc_to + 1.0) {
      after += share;
      ++n_after;
    }
    if (t + 0.1 <= gc_from) share_before = before / n_before;
    if (cut_at < 0 && t >= gc_from && share < share_before / 2) {
      cut_at = t - gc_from;
    }
    std::fprintf(stderr,
                 "%s gc drill: t %.1f s p90 %.0f us %s share %.3f aimd %.3f\n",
                 policy.c_str(), t, p90, gc_name.c_str(), share, aimd / 1000.0);
    if (dat != nullptr) {
      std::fprintf(dat, "%.2f %.1f %.4f %.3f\n", t + 0.05, p90, share,
                   aimd / 1000.0);
    }
  }
  if (dat != nullptr) std::fclose(dat);
  std::printf(
      "%-8s %s's share of reads: before GC %.3f, during %.3f, after %.3f; "
      "cut to half %s after GC began\n",
      policy.c_str(), gc_name.c_str(), n_before ? before / n_before : 0,
      n_during ? during / n_during : 0, n_after ? after / n_after : 0,
      cut_at < 0 ? "never" : StrCat(std::round(cut_at * 1000), " ms").c_str());
  std::fflush(stdout);
}

PolicyResult RunPolicy(const std::string& policy, const Options& o,
                       double ideal) {
  std::vector<testing::TempDir> dirs(o.presets.size());
  testing::TempDir state;
  EmbeddedHost host("bench");
  proto::StageConfig config;
  config.set_name("rs");
  config.set_kind("replica_set");
  auto* rs = config.mutable_replica_set();
  std::vector<std::string> members;
  std::vector<std::shared_ptr<FlashEndpoint>> endpoints;
  std::vector<std::shared_ptr<const Profile>> profiles;
  std::vector<std::shared_ptr<CongestionWatch>> watches;
  for (size_t i = 0; i < o.presets.size(); ++i) {
    FlashEndpoint::Options eo;
    eo.model = *FlashModel::Preset(o.presets[i]);
    eo.dilation = o.dilation;
    auto e = FlashEndpoint::Open(dirs[i].path(), eo);
    if (!e.ok()) {
      std::cerr << e.status() << "\n";
      std::exit(1);
    }
    // The file on every device, its pages written and over-written once
    // (GC in its steady state).
    if (absl::Status s = (*e)->Warm("data", kFilePages * kPage, 1.0, 1 + i);
        !s.ok()) {
      std::cerr << s << "\n";
      std::exit(1);
    }
    const std::string name = StrCat("D", i);
    (void)host.AddEndpoint(name, *e);
    endpoints.push_back(*e);
    members.push_back(name);
    rs->add_member(name);
    profiles.push_back(ProfileOf(o.presets[i], o.dilation, o.route_profiles));
    if (policy == "gimbal" || policy == "sandook") {  // not "plan"
      CongestionOptions co;
      co.threshold = o.threshold / 100.0;
      co.max_baseline = o.max_baseline / 100.0;
      watches.push_back(std::make_shared<CongestionWatch>("bench", name,
                                                          profiles.back(), co));
      (void)host.sswitch().WatchEndpoint(name, watches.back());
    }
  }
  rs->set_ack("all");
  // "plan": sandook's weights and window without congestion marks (its
  // AIMD never cuts).
  const std::string steer = policy == "plan" ? "sandook" : policy;
  rs->set_steer(steer);
  if (o.aimd_floor_percent > 0)
    rs->set_aimd_floor_percent(o.aimd_floor_percent);
  // 64 KiB regions: fds hashes 256 of them over the members (Sandook's
  // hashes blocks; whole MiBs would leave the spread to chance).
  rs->set_region_size(64 << 10);
  if (o.segregate) {
    // Write-anywhere: each 4 KiB region on two members (a write of one
    // page is a whole region).
    rs->set_region_size(4096);
    rs->set_placement("anywhere");
    rs->set_copies(2);
  }
  StageEnv env;
  env.sswitch = &host.sswitch();
  env.state_dir = state.path();
  auto stage = StageRegistry::Global().Create(config, env);
  if (!stage.ok()) {
    std::cerr << stage.status() << "\n";
    std::exit(1);
  }
  (void)host.AddStage("rs", *stage);
  (void)host.LoadRules("<*, *, //home/*> -> <IO, stage:rs>\n");
  SteeringAppOptions app;
  app.target_us = o.target_us * o.dilation;
  PolicyResult out;
  // The app's segregated plan at a load: the write-mode window (sized by
  // the profiles, from `start` around the ring) and the weights.
  std::mutex plan_mu;  // the steps' thread and the epochs' set the plan
  // (drill=segregation changes the mix between steps)
  std::atomic<double> write_fraction{o.write_fraction};
  std::atomic<uint64_t> window_sum{0}, window_plans{0};
  // The members' AIMD multipliers, as the app reads them from the stage's
  // counters each epoch (sandook with derate: a marked member is planned
  // with that share of its capacity; 1 otherwise).
  auto multipliers = [&] {
    std::vector<double> out(members.size(), 1.0);
    if (steer != "sandook" || !o.derate) return out;
    proto::StageStats stats;
    (*stage)->Report(&stats);
    for (size_t i = 0; i < members.size(); ++i) {
      auto it =
          stats.counters().find("member." + members[i] + ".aimd_permille");
      if (it != stats.counters().end() && it->second > 0) {
        out[i] = std::min(1.0, static_cast<double>(it->second) / 1000);
      }
    }
    return out;
  };
  // The app's plan at a load: segregated, the write-mode window (sized by
  // the profiles, from `start` around the ring) and the weights; else the
  // weights (sandook, reflex).
  auto replan = [&](double rate, uint32_t start) {
    std::lock_guard<std::mutex> plan_lock(plan_mu);
    const std::vector<double> aimd = multipliers();
    const double writes = rate * write_fraction.load();
    proto::StageConfig next = (*stage)->config();
    auto* n = next.mutable_replica_set();
    auto weight = [](double share) {
      return static_cast<uint32_t>(std::max(1.0, std::round(share * 10'000)));
    };
    if (o.segregate && (steer == "sandook" || steer == "swan")) {
      std::vector<SteeringDevice> devices;
      for (size_t i = 0; i < members.size(); ++i) {
        devices.push_back({members[i], profiles[i], true, aimd[i]});
      }
      SteeringOptions so;
      so.k = 2;
      so.target_us = o.target_us * o.dilation;
      const SteeringPlan plan =
          PlanSteering(devices, rate - writes, writes, start, so);
      window_sum += plan.window_size;
      ++window_plans;
      n->clear_weight();
      n->clear_write_member();
      n->clear_write_weight();
      for (size_t i = 0; i < members.size(); ++i) {
        const bool even = steer == "swan";
        n->add_weight(weight(even ? 0.5 : plan.read_share[i] / aimd[i]));
        if (plan.write_mode[i]) {
          n->add_write_member(members[i]);
          n->add_write_weight(weight(even ? 0.5 : plan.write_share[i]));
        }
      }
    } else if (steer == "reflex" || steer == "sandook") {
      bool fallback = false;
      auto plan = PlanReplicaSet(steer, members, profiles, rate - writes,
                                 writes, app, &fallback, aimd);
      n->clear_weight();
      for (size_t i = 0; i < plan.size(); ++i) {
        n->add_weight(weight(plan[i].share / aimd[i]));
      }
    } else {
      return;
    }
    const proto::StageConfig now = (*stage)->config();
    const auto& before = now.replica_set().write_member();
    const std::vector<std::string> was(before.begin(), before.end());
    const auto& is = next.replica_set().write_member();
    (void)(*stage)->Reconfigure(next);
    // As the app tells the devices' hosts (SetProfiles.mode_switched): a
    // member that joined or left the window is not judged for 1 ms.
    for (size_t i = 0; i < watches.size() && !was.empty(); ++i) {
      auto holds = [&](const auto& list) {
        return std::find(list.begin(), list.end(), members[i]) != list.end();
      };
      if (holds(was) != holds(is)) {
        watches[i]->detector().ModeSwitched(MonotonicNanos());
      }
    }
  };
  // As the app does every epoch: the plan again at the members' state
  // (their multipliers), and a segregated window slides one member (every
  // device takes writes in turn; what they write spreads over all).
  const bool segregated_steer =
      o.segregate && (steer == "sandook" || steer == "swan");
  std::atomic<double> current_rate{0};
  std::atomic<bool> stop{false};
  std::thread epochs;
  if ((segregated_steer || steer == "sandook") && o.epoch_ms > 0) {
    epochs = std::thread([&] {
      for (uint32_t epoch = 1; !stop.load(); ++epoch) {
        std::this_thread::sleep_for(
            std::chrono::milliseconds(static_cast<int>(o.epoch_ms)));
        if (const double rate = current_rate.load(); rate > 0) {
          replan(rate, epoch % static_cast<uint32_t>(members.size()));
        }
      }
    });
  }
  auto apply_plan = [&](double rate) {
    replan(rate, 0);
    current_rate.store(rate);
  };
  if (!o.write_steps.empty()) {
    // drill=segregation: the same reads (`load` of the reads-only ideal)
    // and more writes each step: the window the plans chose (mean over the
    // epochs) and the share of reads that found their region's holders all
    // in write mode.
    std::printf(
        "%-8s WRITES  OFFERED  SERVED  P90_US  WINDOW  READS_ON_WRITE_MODE\n",
        policy.c_str());
    int64_t reads_before = 0, on_write_before = 0;
    for (double percent : o.write_steps) {
      Options step = o;
      step.write_fraction = percent / 100;
      write_fraction.store(step.write_fraction);
      // The reads stay at `load` of the reads-only ideal; writes come on top.
      Options reads_only = o;
      reads_only.write_fraction = 0;
      const double rate =
          o.load * Ideal(profiles, reads_only) / (1 - step.write_fraction);
      window_sum = 0;
      window_plans = 0;
      apply_plan(rate);
      const Step st = RunStep(host, rate, step, 11, o.step_s);
      proto::StageStats stats;
      (*stage)->Report(&stats);
      auto c = [&](const std::string& k) {
        auto it = stats.counters().find(k);
        return it == stats.counters().end() ? int64_t{0} : it->second;
      };
      const int64_t reads = c("reads"), on_write = c("reads_on_write_mode");
      const double share =
          reads > reads_before
              ? static_cast<double>(on_write - on_write_before) /
                    static_cast<double>(reads - reads_before)
              : 0;
      reads_before = reads;
      on_write_before = on_write;
      std::printf("%-8s %5.0f%%  %7.0f  %6.0f  %6.0f  %6.2f  %18.1f%%\n",
                  policy.c_str(), percent, st.offered, st.served, st.p90_us,
                  window_plans > 0
                      ? static_cast<double>(window_sum.load()) /
                            static_cast<double>(window_plans.load())
                      : 0,
                  100 * share);
      std::fflush(stdout);
    }
    stop.store(true);
    if (epochs.joinable()) epochs.join();
    (void)(*stage)->Stop();
    return out;
  }
  if (o.gc_drill) {
    const double rate = o.load * ideal;
    apply_plan(rate);
    RunGcDrill(policy, host, **stage, endpoints, members, rate, o);
    stop.store(true);
    if (epochs.joinable()) epochs.join();
    (void)(*stage)->Stop();
    return out;
  }
  // Steps of 10 % until the target is missed, then (`refine`) steps of
  // 3 % from the last load that kept it: the table's resolution is 3 %.
  double growth = 1.1;
  int refinements = o.refine ? 2 : 0;
  for (double rate = o.start * ideal; rate < 3 * ideal; rate *= growth) {
    apply_plan(rate);
    // spell_s: a third into the measured span, the next member in turn
    // collects (every policy sees the same spells at the same steps).
    std::thread spell;
    if (o.spell_s > 0) {
      const size_t member = out.steps.size() % members.size();
      spell = std::thread([&, member] {
        std::this_thread::sleep_for(
            std::chrono::duration<double>(o.warmup_s + o.step_s / 3));
        const proto::ReplicaSetOptions now = (*stage)->config().replica_set();
        const bool writes =
            now.write_member().empty() ||
            std::find(now.write_member().begin(), now.write_member().end(),
                      members[member]) != now.write_member().end();
        endpoints[member]->HoldForGc(
            static_cast<uint64_t>(o.spell_s * 1e9 / o.dilation));
        SpellNow().store(writes ? 2 : 1);
        std::this_thread::sleep_for(std::chrono::duration<double>(o.spell_s));
        SpellNow().store(0);
      });
    }
    const Step s = RunStep(host, rate, o, out.steps.size() + 1, o.step_s);
    if (spell.joinable()) spell.join();
    out.steps.push_back(s);
    // Each member's reads, marked replies and AIMD multiplier so far.
    proto::StageStats stats;
    (*stage)->Report(&stats);
    std::string members_text;
    for (const std::string& m : members) {
      auto c = [&](const std::string& k) {
        auto it = stats.counters().find("member." + m + "." + k);
        return it == stats.counters().end() ? int64_t{-1} : it->second;
      };
      StrAppend(&members_text, " ", m, ":", c("reads"), "/", c("congested"),
                "/", c("aimd_permille"));
    }
    // The watches' learned calm ratios (x100).
    for (const auto& w : watches) {
      StrAppend(&members_text, " b",
                std::llround(100 * w->detector().view().baseline));
    }
    // Over the target / measured: reads and writes, outside spells, in
    // spells on read-mode members, in spells on write-taking members.
    if (o.spell_s > 0) {
      StrAppend(&members_text, " slow");
      for (int k = 0; k < 3; ++k) {
        StrAppend(&members_text, " ",
                  k == 0   ? "calm"
                  : k == 1 ? "gcR"
                           : "gcW",
                  " R", s.slow[0][k], "/", s.count[0][k], " W", s.slow[1][k],
                  "/", s.count[1][k]);
      }
    }
    std::fprintf(stderr,
                 "%s: offered %.0f/s served %.0f/s p50 %.0f us p90 %.0f us;"
                 "%s\n",
                 policy.c_str(), s.offered, s.served, s.p50_us, s.p90_us,
                 members_text.c_str());
    if (s.p90_us > o.target_us || s.served < 0.9 * s.offered) {
      if (refinements-- <= 0 || out.max_rate == 0 || growth < 1.05) break;
      growth = 1.03;
      rate = out.max_rate;  // (times growth next)
      continue;
    }
    out.max_rate = s.offered;
  }
  stop.store(true);
  if (epochs.joinable()) epochs.join();
  (void)(*stage)->Stop();
  return out;
}

}  // namespace
}  // namespace sroute

int main(int argc, char** argv) {
  using namespace sroute;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "policies") {
      o.policies = Split(value);
    } else if (key == "presets") {
      o.presets = Split(value);
    } else if (key == "dilation") {
      o.dilation = std::stod(value);
    } else if (key == "write_percent") {
      o.write_fraction = std::stod(value) / 100;
    } else if (key == "target_us") {
      o.target_us = std::stod(value);
    } else if (key == "step_s") {
      o.step_s = std::stod(value);
    } else if (key == "warmup_s") {
      o.warmup_s = std::stod(value);
    } else if (key == "start") {
      o.start = std::stod(value);
    } else if (key == "threads") {
      o.threads = std::stoi(value);
    } else if (key == "derate") {
      o.derate = value != "0";
    } else if (key == "refine") {
      o.refine = value != "0";
    } else if (key == "floor") {
      o.aimd_floor_percent = static_cast<uint32_t>(std::stoul(value));
    } else if (key == "drill") {
      if (value == "gc") {
        o.gc_drill = true;
      } else if (value == "segregation") {
        o.write_steps = {2, 5, 10, 20, 30};
      } else {
        std::cerr << "steer_policies: drill=gc|segregation\n";
        return 2;
      }
    } else if (key == "write_steps") {
      o.write_steps.clear();
      for (const std::string& w : Split(value))
        o.write_steps.push_back(std::stod(w));
    } else if (key == "load") {
      o.load = std::stod(value);
    } else if (key == "drill_s") {
      o.drill_s = std::stod(value);
    } else if (key == "gc_at_s") {
      o.gc_at_s = std::stod(value);
    } else if (key == "gc_s") {
      o.gc_s = std::stod(value);
    } else if (key == "spell_s") {
      o.spell_s = std::stod(value);
    } else if (key == "gc_member") {
      o.gc_member = static_cast<size_t>(std::stoul(value));
    } else if (key == "drill_out") {
      o.drill_out = value;
      std::filesystem::create_directories(value);
    } else if (key == "profile_dir") {
      ProfileDir() = value;
      std::filesystem::create_directories(value);
    } else if (key == "epoch_ms") {
      o.epoch_ms = std::stod(value);
    } else if (key == "segregate") {
      o.segregate = value == "1";
    } else if (key == "profiles") {
      o.route_profiles = value != "model";
    } else if (key == "zipf") {
      o.zipf = std::stod(value);
    } else if (key == "threshold") {
      o.threshold = static_cast<uint32_t>(std::stoi(value));
    } else if (key == "max_baseline") {
      o.max_baseline = static_cast<uint32_t>(std::stoi(value));
    } else {
      std::cerr << "steer_policies: unknown argument " << a << "\n";
      return 2;
    }
  }
  std::vector<std::shared_ptr<const Profile>> profiles;
  for (const std::string& p : o.presets) {
    if (!FlashModel::Preset(p).ok()) {
      std::cerr << "steer_policies: no preset " << p << "\n";
      return 2;
    }
    profiles.push_back(ProfileOf(p, o.dilation, o.route_profiles));
  }
  const double ideal = Ideal(profiles, o);
  std::printf(
      "pool %s, dilation %g, %g%% writes, zipf %g, p90 target %g us (model), "
      "%s\n",
      absl::StrJoin(o.presets, ",").c_str(), o.dilation, o.write_fraction * 100,
      o.zipf, o.target_us,
      o.segregate ? "each region on 2 members (placement anywhere)"
                  : "every member holds every byte");
  std::printf("ideal (%s profiles): %.0f requests/s (%.0f in model time)\n",
              o.route_profiles ? "route" : "model", ideal, ideal * o.dilation);
  const bool drill = o.gc_drill || !o.write_steps.empty();
  if (!drill) {
    std::printf("POLICY   MAX_IOPS  MODEL_IOPS  OF_IDEAL  VS_FDS\n");
  }
  double fds = 0;
  for (const std::string& policy : o.policies) {
    const PolicyResult r = RunPolicy(policy, o, ideal);
    if (drill) continue;  // (it printed its own)
    if (policy == "fds") fds = r.max_rate;
    std::printf(
        "%-8s %8.0f  %10.0f  %7.0f%%  %6s\n", policy.c_str(), r.max_rate,
        r.max_rate * o.dilation, ideal > 0 ? 100 * r.max_rate / ideal : 0,
        fds > 0 ? StrCat(std::round(100 * r.max_rate / fds) / 100, "x").c_str()
                : "-");
    std::fflush(stdout);
  }
  return 0;
}

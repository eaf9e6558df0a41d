// SPDX-License-Identifier: Apache-2.0
// gc_ycsb: YCSB-style mixes on a replicated pair of emulated flash vSSDs
// under GC pressure (issue 24's benchmark), through the real data path: a
// EmbeddedHost, a replica_set stage of two FlashEndpoints, reads at random
// between the replicas. The devices are warmed up first (60 % of their logical
// pages written, then as many again over-written at random, then a GC
// pass: garbage is there, GC soon has work). Four set-ups, side by side
// in one run:
//   a  GC-oblivious: gc=off, the devices collect on their own (own_gc:
//      mode=self, a pass of the whole vSSD at gc_threshold, as RackBlox's
//      vSSDs do; or mode=auto, each die on its own)
//   b  redirection only: gc=redirect, devices as in a
//   c  redirection and delayed GC: gc=delay, devices mode=coordinated
//   d  c and background GC: gc=background
// Load: `threads` clients issuing `rate` operations a second between them
// (exponential gaps, each client waiting for its previous operation),
// zipfian keys (theta 0.99, hot keys scattered), 4 KiB records (one page
// each); bursts of 190 ms of model time then 60 ms idle (background GC
// needs idle periods to predict).
// Times are model times: wall times divided by the dilation.
//
//   gc_ycsb [workload=A,B,C,D,E,F,W] [seconds=10] [threads=8]
//           [rate=4000] [dilation=10] [own_gc=self|auto] [cdf_dir=DIR]
//
// Workloads (YCSB core): A 50 % updates, B 5 %, C none, D 5 % inserts
// and reads of the latest, E 95 % short scans (1-16 records) and 5 %
// inserts, F 50 % read-modify-write, W 95 % updates. Prints one table per
// workload; with cdf_dir, each set-up's read latencies as a CDF
// (DIR/WORKLOAD_SETUP.dat: latency_us fraction) for bench/gc_ycsb_plot.gp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "embed/embedded_host.h"
#include "endpoints/flash_endpoint.h"
#include "stages/stage.h"
#include "tests/util/temp_dir.h"
#include "util/clock.h"
#include "util/mutex.h"
#include "util/zipfian.h"

namespace sroute {
namespace {

constexpr uint64_t kPage = 4096;
constexpr char kFile[] = "ycsb";

struct Options {
  std::string workloads = "A,B,C,D,E,F,W";
  double seconds = 10;
  int threads = 8;
  double dilation = 10;
  double rate = 4000;  // operations a second (model time), all clients
  GcMode own_gc = GcMode::kSelf;  // the devices of set-ups a and b
  std::string cdf_dir;
};

struct Result {
  std::vector<uint64_t> read_ns, write_ns;  // model time
  uint64_t ops = 0;
  double model_seconds = 0;
  int64_t redirects = 0, soft = 0, delayed = 0, regular = 0, bg = 0, device = 0;
  uint64_t gc_passes = 0, reads_behind_gc = 0, writes_waited = 0;
};

FlashOptions Device(GcMode mode) {
  FlashOptions o = *FlashModel::Preset("rackblox");
  // 8 dies of 32 blocks of 64 pages (64 MiB raw): small enough to warm
  // up at once and to keep in real files, GC working as on the preset.
  o.geometry.channels = 4;
  o.geometry.dies_per_channel = 2;
  o.geometry.blocks_per_die = 32;
  o.geometry.pages_per_block = 64;
  o.timing.buffer_pages = 1024;
  o.mode = mode;
  return o;
}

int64_t CounterOf(const proto::StageStats& s, const std::string& name) {
  auto it = s.counters().find(name);
  return it == s.counters().end() ? 0 : it->second;
}

Result RunOne(char setup, char workload, const Options& opt) {
  testing::TempDir dirs[2], state;
  EmbeddedHost host("bench");
  std::shared_ptr<FlashEndpoint> ssd[2];
  const FlashOptions model =
      Device(setup == 'c' || setup == 'd' ? GcMode::kCoordinated : opt.own_gc);
  // Data on 60 % of the logical pages (half the raw ones): a GC pass can
  // reach its target (40 % of blocks free) by collecting garbage.
  const uint64_t records = model.geometry.logical_pages() * 60 / 100;
  for (int i = 0; i < 2; ++i) {
    FlashEndpoint::Options o;
    o.model = model;
    o.dilation = opt.dilation;
    auto e = FlashEndpoint::Open(dirs[i].path(), o);
    if (!e.ok()) {
      std::cerr << e.status() << "\n";
      std::exit(1);
    }
    ssd[i] = *e;
    // Each replica its own history (seed): replicas that were written
    // alike from empty would need GC at the same moment forever after,
    // and no routing could find one that is not collecting.
    if (absl::Status s = ssd[i]->Warm(kFile, records * kPage, 1.0, 1 + i);
        !s.ok()) {
      std::cerr << s << "\n";
      std::exit(1);
    }
    (void)host.AddEndpoint(i == 0 ? "V1" : "V2", ssd[i]);
  }
  proto::StageConfig config;
  config.set_name("rs");
  config.set_kind("replica_set");
  proto::ReplicaSetOptions& rs = *config.mutable_replica_set();
  rs.add_member("V1");
  rs.add_member("V2");
  rs.set_read("random");
  rs.set_ack("all");
  rs.set_gc(setup == 'a'   ? "off"
            : setup == 'b' ? "redirect"
            : setup == 'c' ? "delay"
                           : "background");
  rs.set_gc_poll_us(static_cast<uint32_t>(100 * opt.dilation));  // 100 us
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

  const std::string file = std::string("//home/") + kFile;
  // Inserts (D, E) write records past the loaded ones, up to the file's end.
  const uint64_t loaded = records * 9 / 10;
  std::atomic<uint64_t> next_insert{loaded};
  const Zipfian zipf(loaded);
  const double d = opt.dilation;
  const uint64_t period = static_cast<uint64_t>(250e6 * d);
  const uint64_t idle = static_cast<uint64_t>(60e6 * d);
  const uint64_t start = MonotonicNanos();
  const uint64_t end = start + static_cast<uint64_t>(opt.seconds * 1e9);
  Mutex mu;
  Result r;
  std::vector<std::thread> clients;
  for (int t = 0; t < opt.threads; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      std::vector<char> buf(16 * kPage);
      std::vector<uint64_t> reads, writes;
      auto read = [&](uint64_t key, uint64_t n) {
        const uint64_t t0 = MonotonicNanos();
        (void)host.Read("t", file, key * kPage,
                        std::span<char>(buf.data(), n * kPage));
        reads.push_back(static_cast<uint64_t>((MonotonicNanos() - t0) / d));
      };
      auto write = [&](uint64_t key) {
        buf[0] = static_cast<char>(rng());
        const uint64_t t0 = MonotonicNanos();
        (void)host.Write("t", file, key * kPage,
                         std::span<const char>(buf.data(), kPage));
        writes.push_back(static_cast<uint64_t>((MonotonicNanos() - t0) / d));
      };
      auto latest = [&] {
        const uint64_t top = next_insert.load();
        return top - 1 - std::min(top - 1, zipf.Rank(rng));
      };
      auto insert = [&] {
        uint64_t key = next_insert.fetch_add(1);
        if (key >= records) key = loaded + key % (records - loaded);
        write(key);
      };
      // Paced: each client issues its share of `rate` at exponential
      // intervals (an open load while the device keeps up); latency is
      // from the issue.
      std::exponential_distribution<double> gap(opt.rate / opt.threads);
      uint64_t due = MonotonicNanos();
      for (;;) {
        due += static_cast<uint64_t>(gap(rng) * 1e9 * d);
        if (const uint64_t at = MonotonicNanos(); due > at) {
          std::this_thread::sleep_for(std::chrono::nanoseconds(due - at));
        }
        const uint64_t now = MonotonicNanos();
        if (now >= end) break;
        if ((now - start) % period >= period - idle) {
          std::this_thread::sleep_for(
              std::chrono::nanoseconds(period - (now - start) % period));
          continue;
        }
        const uint32_t dice = static_cast<uint32_t>(rng() % 100);
        switch (workload) {
          case 'A':
            dice < 50 ? write(zipf.Key(rng)) : read(zipf.Key(rng), 1);
            break;
          case 'B':
            dice < 5 ? write(zipf.Key(rng)) : read(zipf.Key(rng), 1);
            break;
          case 'C':
            read(zipf.Key(rng), 1);
            break;
          case 'D':
            dice < 5 ? insert() : read(latest(), 1);
            break;
          case 'E':
            if (dice < 5) {
              insert();
            } else {
              const uint64_t key = zipf.Key(rng);
              read(key, std::min<uint64_t>(1 + rng() % 16, records - key));
            }
            break;
          case 'F': {
            const uint64_t key = zipf.Key(rng);
            read(key, 1);
            if (dice < 50) write(key);
            break;
          }
          case 'W':
            dice < 95 ? write(zipf.Key(rng)) : read(zipf.Key(rng), 1);
            break;
        }
      }
      MutexLock l(&mu);
      r.ops += reads.size() + writes.size();
      r.read_ns.insert(r.read_ns.end(), reads.begin(), reads.end());
      r.write_ns.insert(r.write_ns.end(), writes.begin(), writes.end());
    });
  }
  for (std::thread& c : clients) c.join();
  r.model_seconds = static_cast<double>(MonotonicNanos() - start) / 1e9 / d;
  proto::StageStats stats;
  (*stage)->Report(&stats);
  r.redirects = CounterOf(stats, "gc_redirects");
  r.soft = CounterOf(stats, "gc_granted_soft");
  r.delayed = CounterOf(stats, "gc_soft_delayed");
  r.regular = CounterOf(stats, "gc_granted_regular");
  r.bg = CounterOf(stats, "gc_granted_bg");
  r.device = CounterOf(stats, "gc_device_passes");
  for (auto& s : ssd) {
    const FlashState st = s->State();
    r.gc_passes += st.gc_passes;
    r.reads_behind_gc += st.reads_behind_gc;
    r.writes_waited += st.writes_waited;
  }
  (void)(*stage)->Stop();
  return r;
}

double Percentile(std::vector<uint64_t>& v, double p) {
  if (v.empty()) return 0;
  const size_t i = std::min(
      v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(i), v.end());
  return static_cast<double>(v[i]) / 1000;
}

double Mean(const std::vector<uint64_t>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (uint64_t x : v) sum += static_cast<double>(x);
  return sum / static_cast<double>(v.size()) / 1000;
}

void WriteCdf(const std::string& path, std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  std::ofstream out(path);
  const size_t points = 2000;
  for (size_t i = 0; i < points && !v.empty(); ++i) {
    // Denser towards the tail: fraction 1 - 10^(-4 i / points).
    const double f = 1.0 - std::pow(10.0, -4.0 * static_cast<double>(i) /
                                              static_cast<double>(points));
    const size_t at = std::min(
        v.size() - 1, static_cast<size_t>(f * static_cast<double>(v.size())));
    out << static_cast<double>(v[at]) / 1000 << " " << f << "\n";
  }
}

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (key == "workload") {
      opt.workloads = value;
    } else if (key == "seconds") {
      opt.seconds = std::stod(value);
    } else if (key == "threads") {
      opt.threads = std::stoi(value);
    } else if (key == "rate") {
      opt.rate = std::stod(value);
    } else if (key == "dilation") {
      opt.dilation = std::stod(value);
    } else if (key == "cdf_dir") {
      opt.cdf_dir = value;
    } else if (key == "own_gc" && (value == "self" || value == "auto")) {
      opt.own_gc = value == "self" ? GcMode::kSelf : GcMode::kAuto;
    } else {
      std::cerr << "gc_ycsb: unknown argument '" << a
                << "' (workload, seconds, threads, rate, dilation, "
                   "own_gc=self|auto, cdf_dir)\n";
      return 2;
    }
  }
  for (char w : opt.workloads) {
    if (w == ',') continue;
    std::printf(
        "workload %c (model us; %d clients, dilation %g, %g s a set-up; "
        "devices of a and b: mode=%s)\n"
        "setup  read_mean  read_p50  read_p99  read_p99.9  write_mean  "
        "write_p50  write_p99  write_p99.9  kops/s  redirects  "
        "soft(delayed)  regular  bg  "
        "device  passes  reads_behind_gc  writes_waited\n",
        w, opt.threads, opt.dilation, opt.seconds,
        opt.own_gc == GcMode::kSelf ? "self" : "auto");
    for (char setup : std::string("abcd")) {
      Result r = RunOne(setup, w, opt);
      std::printf(
          "%c      %9.0f  %8.0f  %8.0f  %10.0f  %10.0f  %9.0f  %9.0f  "
          "%11.0f  %6.1f  %9lld  %5lld(%lld)  %7lld  %2lld  %6lld  %6llu  "
          "%15llu  %llu\n",
          setup, Mean(r.read_ns), Percentile(r.read_ns, 0.5),
          Percentile(r.read_ns, 0.99), Percentile(r.read_ns, 0.999),
          Mean(r.write_ns), Percentile(r.write_ns, 0.5),
          Percentile(r.write_ns, 0.99), Percentile(r.write_ns, 0.999),
          static_cast<double>(r.ops) / r.model_seconds / 1000,
          static_cast<long long>(r.redirects), static_cast<long long>(r.soft),
          static_cast<long long>(r.delayed), static_cast<long long>(r.regular),
          static_cast<long long>(r.bg), static_cast<long long>(r.device),
          static_cast<unsigned long long>(r.gc_passes),
          static_cast<unsigned long long>(r.reads_behind_gc),
          static_cast<unsigned long long>(r.writes_waited));
      std::fflush(stdout);
      if (!opt.cdf_dir.empty()) {
        WriteCdf(opt.cdf_dir + "/" + w + "_" + setup + ".dat", r.read_ns);
      }
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace
}  // namespace sroute

int main(int argc, char** argv) { return sroute::Main(argc, argv); }

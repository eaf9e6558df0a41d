// SPDX-License-Identifier: Apache-2.0
// burst_driver: an open-loop workload shaped like the Exchange volumes of
// the sRoute paper (§5.1): a max, a median and a min flow, each a file with
// a quiet request rate, and bursts that multiply one flow's rate (two orders
// of magnitude) for minutes. Arrivals are Poisson, drawn from a seed before
// the run starts, so a run can be replayed exactly against another setup
// (with and without the tail_latency app). Time is compressible: the
// schedule's durations are divided by --compress, the rates kept.
//
// Latency is measured from each IO's scheduled time (open loop: an IO that
// waits for a free worker or a slow server counts that wait), per flow and
// op, over the whole run and inside the burst windows.
//
//   burst_driver --file max=/mnt/vol/max --file med=/mnt/vol/med
//       --file min=/mnt/vol/min --quiet max=100,med=40,min=5
//       --burst max:100:20:60 --duration 120 --compress 4 --seed 1
//       [--write-share 0.6] [--workers 64] [--csv lat.csv]
//
// --burst FLOW:FACTOR:START:LENGTH (seconds of the uncompressed schedule;
// repeatable). The files must exist; their size bounds the offsets (4 KiB
// blocks, uniformly at random). --csv writes "flow,op,at_us,latency_us,burst"
// per IO, for CDF plots.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBlock = 4096;

struct Flow {
  std::string name, path;
  double quiet = 0;  // ops/s
  int fd = -1;
  uint64_t blocks = 0;
};

struct Burst {
  std::string flow;
  double factor = 1, start = 0, length = 0;  // uncompressed seconds
};

struct Op {
  double at;  // seconds from the start (compressed)
  uint32_t flow;
  bool write;
  uint64_t block;
  bool in_burst;
  double latency_us = 0;
  bool failed = false;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr, "burst_driver: %s (see the header of burst_driver.cc)\n",
               why);
  std::exit(1);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep, start);
    out.push_back(s.substr(start, at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(
      v.size() - 1, static_cast<size_t>(std::ceil(p * v.size())) - (p > 0));
  return v[i];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Flow> flows;
  std::vector<Burst> bursts;
  std::map<std::string, double> quiet;
  double duration = 120, compress = 1, write_share = 0.6;
  uint64_t seed = 1;
  int workers = 64;
  std::string csv;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) Usage(("missing value of " + a).c_str());
      return argv[++i];
    };
    if (a == "--file") {
      const std::string v = next();
      const size_t eq = v.find('=');
      if (eq == std::string::npos) Usage("--file NAME=PATH");
      flows.push_back(Flow{v.substr(0, eq), v.substr(eq + 1)});
    } else if (a == "--quiet") {
      for (const std::string& kv : Split(next(), ',')) {
        const size_t eq = kv.find('=');
        if (eq == std::string::npos) Usage("--quiet NAME=OPS,...");
        quiet[kv.substr(0, eq)] = std::atof(kv.c_str() + eq + 1);
      }
    } else if (a == "--burst") {
      const auto f = Split(next(), ':');
      if (f.size() != 4) Usage("--burst FLOW:FACTOR:START:LENGTH");
      bursts.push_back(Burst{f[0], std::atof(f[1].c_str()),
                             std::atof(f[2].c_str()), std::atof(f[3].c_str())});
    } else if (a == "--duration") {
      duration = std::atof(next().c_str());
    } else if (a == "--compress") {
      compress = std::atof(next().c_str());
    } else if (a == "--write-share") {
      write_share = std::atof(next().c_str());
    } else if (a == "--seed") {
      seed = std::strtoull(next().c_str(), nullptr, 10);
    } else if (a == "--workers") {
      workers = std::atoi(next().c_str());
    } else if (a == "--csv") {
      csv = next();
    } else {
      Usage(("unknown argument " + a).c_str());
    }
  }
  if (flows.empty()) Usage("no --file");
  if (compress <= 0 || duration <= 0 || workers <= 0) Usage("bad numbers");
  for (Flow& f : flows) {
    f.quiet = quiet.count(f.name) ? quiet[f.name] : 10;
    f.fd = open(f.path.c_str(), O_RDWR);
    struct stat st;
    if (f.fd < 0 || fstat(f.fd, &st) != 0 || st.st_size < off_t{kBlock}) {
      std::fprintf(stderr, "burst_driver: %s: %s\n", f.path.c_str(),
                   f.fd < 0 ? std::strerror(errno) : "smaller than 4 KiB");
      return 1;
    }
    f.blocks = static_cast<uint64_t>(st.st_size) / kBlock;
  }
  for (const Burst& b : bursts) {
    if (std::none_of(flows.begin(), flows.end(),
                     [&](const Flow& f) { return f.name == b.flow; })) {
      Usage(("--burst of unknown flow " + b.flow).c_str());
    }
  }

  // The schedule: Poisson arrivals per flow, the rate piecewise constant
  // (quiet, or quiet x factor inside a burst), drawn before the run.
  std::mt19937_64 rng(seed);
  std::vector<Op> ops;
  for (uint32_t fi = 0; fi < flows.size(); ++fi) {
    const Flow& f = flows[fi];
    double t = 0;  // uncompressed seconds
    while (true) {
      double rate = f.quiet;
      bool in = false;
      double change = duration;  // when the rate changes next
      for (const Burst& b : bursts) {
        if (b.flow != f.name) continue;
        if (t >= b.start && t < b.start + b.length) {
          rate = f.quiet * b.factor, in = true;
          change = std::min(change, b.start + b.length);
        } else if (t < b.start) {
          change = std::min(change, b.start);
        }
      }
      // Rates are per real second, and a schedule second lasts 1/compress
      // of one: it holds rate/compress arrivals.
      const double per_schedule_s = rate / compress;
      std::exponential_distribution<double> gap(per_schedule_s);
      const double next = t + gap(rng);
      if (next >= change) {
        if (change >= duration) break;
        t = change;  // memoryless: draw again from the new rate
        continue;
      }
      t = next;
      std::uniform_real_distribution<double> u(0, 1);
      ops.push_back(
          Op{t / compress, fi, u(rng) < write_share, rng() % f.blocks, in});
    }
  }
  std::sort(ops.begin(), ops.end(),
            [](const Op& a, const Op& b) { return a.at < b.at; });
  std::fprintf(stderr, "burst_driver: %zu IOs over %.1f s\n", ops.size(),
               duration / compress);

  std::atomic<size_t> next{0};
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(50);
  // The schedule's zero on the wall clock, to line the IOs up with other
  // logs (the tail_latency app's reclaim).
  std::fprintf(stderr, "burst_driver: schedule starts at unix %.3f\n",
               std::chrono::duration<double>(
                   std::chrono::system_clock::now().time_since_epoch())
                       .count() +
                   0.05);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      std::vector<char> buf(kBlock, 'w');
      while (true) {
        const size_t i = next.fetch_add(1);
        if (i >= ops.size()) return;
        Op& op = ops[i];
        const Clock::time_point due =
            start + std::chrono::nanoseconds(static_cast<int64_t>(op.at * 1e9));
        std::this_thread::sleep_until(due);
        const Flow& f = flows[op.flow];
        const off_t off = static_cast<off_t>(op.block * kBlock);
        ssize_t n;
        if (op.write) {
          std::memcpy(buf.data(), &i, sizeof(i));
          n = pwrite(f.fd, buf.data(), kBlock, off);
        } else {
          n = pread(f.fd, buf.data(), kBlock, off);
        }
        op.failed = n != static_cast<ssize_t>(kBlock);
        op.latency_us =
            std::chrono::duration<double, std::micro>(Clock::now() - due)
                .count();
      }
    });
  }
  for (auto& t : threads) t.join();
  const double took =
      std::chrono::duration<double>(Clock::now() - start).count();

  // flow op window ops failed p50 p99 p99.9 (µs)
  std::printf("%-6s %-5s %-6s %9s %6s %10s %10s %10s\n", "flow", "op", "window",
              "ops", "failed", "p50_us", "p99_us", "p99.9_us");
  for (uint32_t fi = 0; fi < flows.size(); ++fi) {
    for (int write = 0; write < 2; ++write) {
      for (int window = 0; window < 2; ++window) {
        std::vector<double> lat;
        uint64_t failed = 0;
        for (const Op& op : ops) {
          if (op.flow != fi || op.write != (write == 1)) continue;
          if (window == 1 && !op.in_burst) continue;
          if (op.failed) ++failed;
          lat.push_back(op.latency_us);
        }
        if (window == 1 && lat.empty()) continue;
        std::printf("%-6s %-5s %-6s %9zu %6llu %10.0f %10.0f %10.0f\n",
                    flows[fi].name.c_str(), write ? "write" : "read",
                    window ? "burst" : "all", lat.size(),
                    static_cast<unsigned long long>(failed),
                    Percentile(lat, 0.5), Percentile(lat, 0.99),
                    Percentile(lat, 0.999));
      }
    }
  }
  std::printf("total %zu IOs in %.1f s (%.0f IOs/s)\n", ops.size(), took,
              ops.size() / took);
  if (!csv.empty()) {
    FILE* out = std::fopen(csv.c_str(), "w");
    if (out == nullptr) {
      std::perror(csv.c_str());
      return 1;
    }
    std::fprintf(out, "flow,op,at_us,latency_us,burst\n");
    for (const Op& op : ops) {
      std::fprintf(out, "%s,%s,%.0f,%.1f,%d\n", flows[op.flow].name.c_str(),
                   op.write ? "write" : "read", op.at * 1e6, op.latency_us,
                   op.in_burst ? 1 : 0);
    }
    std::fclose(out);
  }
  for (const Flow& f : flows) close(f.fd);
  return 0;
}

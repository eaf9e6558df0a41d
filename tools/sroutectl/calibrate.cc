// SPDX-License-Identifier: Apache-2.0
#include "tools/sroutectl/calibrate.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "stages/qos/device_curve.h"
#include "util/strings.h"

namespace sroute::ctl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBlock = 4096;

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(StrCat(what, ": ", strerror(errno)));
}

// An aligned 4 KiB buffer (O_DIRECT wants one).
struct Buffer {
  Buffer() {
    if (posix_memalign(&data, kBlock, kBlock) != 0) data = nullptr;
    if (data != nullptr) memset(data, 0x5a, kBlock);
  }
  ~Buffer() { free(data); }
  void* data = nullptr;
};

struct Step {
  double iops = 0;
  absl::Duration p95;
  uint64_t errors = 0;
};

// One step: `rate` requests/s offered as a Poisson process (0: each of
// `depth` threads issues back to back), `write_fraction` of them writes, at
// random 4 KiB blocks of the first `blocks`, for `warmup` and then `length`,
// which alone is measured.
Step RunStep(int fd, uint64_t blocks, double rate, double write_fraction,
             uint32_t depth, std::chrono::milliseconds warmup,
             std::chrono::milliseconds length, uint32_t seed) {
  const Clock::time_point begin = Clock::now();
  const Clock::time_point start = begin + warmup;  // measured from here
  const Clock::time_point end = start + length;
  // Arrival times, planned before the step (open loop).
  std::vector<Clock::time_point> arrivals;
  if (rate > 0) {
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> gap(rate);
    const double total = std::chrono::duration<double>(end - begin).count();
    for (double t = gap(rng); t < total; t += gap(rng)) {
      arrivals.push_back(begin + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(t)));
    }
  }
  std::atomic<size_t> next{0};
  std::vector<std::vector<double>> latencies(depth);  // us
  std::vector<uint64_t> errors(depth, 0);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < depth; ++i) {
    threads.emplace_back([&, i] {
      Buffer buf;
      std::mt19937_64 rng(seed * 7919 + i);
      std::uniform_real_distribution<double> coin(0, 1);
      while (true) {
        Clock::time_point planned;
        if (rate > 0) {
          const size_t k = next.fetch_add(1);
          if (k >= arrivals.size()) return;
          planned = arrivals[k];
          std::this_thread::sleep_until(planned);
        } else {
          planned = Clock::now();
          if (planned >= end) return;
        }
        const off_t offset = static_cast<off_t>(rng() % blocks) * kBlock;
        const ssize_t n = coin(rng) < write_fraction
                              ? pwrite(fd, buf.data, kBlock, offset)
                              : pread(fd, buf.data, kBlock, offset);
        const Clock::time_point done = Clock::now();
        if (n != static_cast<ssize_t>(kBlock)) {
          ++errors[i];
          continue;
        }
        if (done > end + length) return;  // far behind: the step is over
        if (planned < start || planned >= end) continue;  // not measured
        latencies[i].push_back(
            std::chrono::duration<double, std::micro>(done - planned).count());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<double> all;
  Step s;
  for (uint32_t i = 0; i < depth; ++i) {
    all.insert(all.end(), latencies[i].begin(), latencies[i].end());
    s.errors += errors[i];
  }
  const double seconds =
      std::max(std::chrono::duration<double>(length).count(),
               std::chrono::duration<double>(Clock::now() - start).count());
  s.iops = all.size() / seconds;
  if (!all.empty()) {
    // The nearest-rank p95.
    const size_t rank = static_cast<size_t>(std::ceil(0.95 * all.size()));
    const size_t k = std::max<size_t>(rank, 1) - 1;
    std::nth_element(all.begin(), all.begin() + k, all.end());
    s.p95 = absl::Microseconds(all[k]);
  }
  return s;
}

// Makes PATH (it must not exist) and writes it whole, so that reads find
// data where a device stores it.
absl::StatusOr<int> MakeFile(const std::string& path, uint64_t size) {
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);
  if (fd < 0 && errno == EINVAL) {
    fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  }
  if (fd < 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(
          StrCat(path,
                 " exists: calibration makes its own file (and removes "
                 "it); name one that does not exist"));
    }
    return Errno(StrCat("cannot make ", path));
  }
  void* mem = nullptr;
  if (posix_memalign(&mem, kBlock, 1 << 20) != 0) {
    close(fd);
    unlink(path.c_str());
    return absl::ResourceExhaustedError("no memory for the fill buffer");
  }
  memset(mem, 0xa5, 1 << 20);
  for (uint64_t at = 0; at < size; at += 1 << 20) {
    const size_t n = std::min<uint64_t>(1 << 20, size - at);
    if (pwrite(fd, mem, n, at) != static_cast<ssize_t>(n)) {
      const absl::Status s = Errno(StrCat("cannot fill ", path));
      free(mem);
      close(fd);
      unlink(path.c_str());
      return s;
    }
  }
  free(mem);
  if (fsync(fd) != 0) {
    const absl::Status s = Errno(StrCat("cannot sync ", path));
    close(fd);
    unlink(path.c_str());
    return s;
  }
  return fd;
}

}  // namespace

absl::StatusOr<proto::CtlQosCalibration> Calibrate(const CalibrateOptions& o) {
  if (o.size_bytes < kBlock * 16 || o.size_bytes % kBlock != 0) {
    return absl::InvalidArgumentError(
        "--size: a multiple of 4 KiB, at least 64 KiB");
  }
  if (o.step_ms < 10 || o.depth < 1 || o.depth > 1024 || o.loads < 1) {
    return absl::InvalidArgumentError(
        "--step-ms at least 10, --depth 1..1024, --loads at least 1");
  }
  if (std::find(o.write_percents.begin(), o.write_percents.end(), 0u) ==
      o.write_percents.end()) {
    return absl::InvalidArgumentError(
        "--mixes must include 0 (the read-only curve the others are fitted "
        "to)");
  }
  for (uint32_t w : o.write_percents) {
    if (w > 100) return absl::InvalidArgumentError("--mixes: percents 0..100");
  }
  auto fd = MakeFile(o.path, o.size_bytes);
  if (!fd.ok()) return fd.status();
  const uint64_t blocks = o.size_bytes / kBlock;
  const auto length = std::chrono::milliseconds(o.step_ms);
  const auto warmup = std::chrono::milliseconds(o.warmup_ms);
  proto::CtlQosCalibration out;
  out.set_path(o.path);
  std::vector<CalibrationSample> samples;
  uint32_t seed = 1;
  uint64_t errors = 0;
  for (uint32_t w : o.write_percents) {
    const double wf = w / 100.0;
    const Step peak =
        RunStep(*fd, blocks, 0, wf, o.depth, warmup, length, seed++);
    proto::CtlQosStep* ps = out.add_steps();
    ps->set_write_percent(w);
    ps->set_iops(peak.iops);
    ps->set_p95_us(absl::ToInt64Microseconds(peak.p95));
    ps->set_errors(peak.errors);
    errors += peak.errors;
    for (uint32_t i = 1; i <= o.loads; ++i) {
      const double rate = peak.iops * i / o.loads;
      const Step s =
          RunStep(*fd, blocks, rate, wf, o.depth, warmup, length, seed++);
      proto::CtlQosStep* p = out.add_steps();
      p->set_write_percent(w);
      p->set_offered_iops(rate);
      p->set_iops(s.iops);
      p->set_p95_us(absl::ToInt64Microseconds(s.p95));
      p->set_errors(s.errors);
      errors += s.errors;
      samples.push_back({wf, s.iops, s.p95});
    }
  }
  close(*fd);
  if (unlink(o.path.c_str()) != 0)
    return Errno(StrCat("cannot remove ", o.path));
  if (errors > 0) {
    return absl::UnavailableError(
        StrCat(errors, " requests to ", o.path,
               " failed during the sweep: the curve would be wrong"));
  }
  const double cost = FitWriteCost(samples);
  std::vector<absl::Duration> targets;
  for (uint32_t t : o.targets_us) targets.push_back(absl::Microseconds(t));
  std::sort(targets.begin(), targets.end());
  const DeviceCurve curve = BuildCurve(samples, cost, targets);
  out.set_write_cost(cost);
  std::string options = StrCat("write_cost=", std::lround(cost));
  for (const QosCurvePoint& p : curve.points) {
    proto::CtlQosCurvePoint* c = out.add_curve();
    c->set_p95_us(absl::ToInt64Microseconds(p.p95));
    c->set_tokens_per_s(std::llround(p.tokens_per_s));
    c->set_read_only_tokens_per_s(std::llround(p.read_only_tokens_per_s));
    StrAppend(&options, ",curve=", c->p95_us(), "/", c->tokens_per_s(), "/",
              c->read_only_tokens_per_s());
  }
  out.set_stage_options(options);
  return out;
}

std::string CalibrationText(const proto::CtlQosCalibration& c) {
  std::string out =
      StrCat("calibrated through ", c.path(), ": a write costs ",
             c.write_cost(), " reads\n\nMIX  OFFERED_IOPS  IOPS  P95_US\n");
  for (const proto::CtlQosStep& s : c.steps()) {
    StrAppend(&out, s.write_percent(), "%w  ",
              s.offered_iops() == 0 ? std::string("peak")
                                    : StrCat(std::llround(s.offered_iops())),
              "  ", std::llround(s.iops()), "  ", s.p95_us(), "\n");
  }
  StrAppend(&out, "\nP95_US  TOKENS_PER_S  READ_ONLY_TOKENS_PER_S\n");
  for (const proto::CtlQosCurvePoint& p : c.curve()) {
    StrAppend(&out, p.p95_us(), "  ", p.tokens_per_s(), "  ",
              p.read_only_tokens_per_s(), "\n");
  }
  if (c.curve_size() == 0) {
    StrAppend(&out,
              "(no target was met at the lowest load: give larger "
              "--targets-us)\n");
  }
  StrAppend(&out, "\nstage options: ", c.stage_options(), "\n");
  return out;
}

}  // namespace sroute::ctl

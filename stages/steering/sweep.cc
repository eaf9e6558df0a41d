// SPDX-License-Identifier: Apache-2.0
#include "stages/steering/sweep.h"

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <thread>

#include "absl/time/clock.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/quantile.h"
#include "util/signal.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr uint32_t kBlock = 4096;
constexpr char kSweepFile[] = ".sroute/profile-sweep";

struct Options {
  std::vector<uint32_t> percents;
  uint32_t step_percent, step_ms, warmup_ms, depth, budget_ms;
  uint64_t size_bytes;
};

absl::StatusOr<Options> OptionsOf(const proto::ProfileEndpoint& r) {
  Options o;
  o.percents.assign(r.write_percent().begin(), r.write_percent().end());
  if (o.percents.empty()) o.percents = {0, 10, 20, 25, 30, 50, 70, 75, 100};
  for (size_t i = 0; i < o.percents.size(); ++i) {
    if (o.percents[i] > 100 || (i > 0 && o.percents[i] <= o.percents[i - 1])) {
      return absl::InvalidArgumentError(
          "write percents must rise strictly within 0..100");
    }
  }
  o.step_percent = r.step_percent() == 0 ? 1 : r.step_percent();
  o.step_ms = r.step_ms() == 0 ? kSweepStepMs : r.step_ms();
  o.warmup_ms = r.warmup_ms() == 0 ? kSweepWarmupMs : r.warmup_ms();
  o.depth = r.depth() == 0 ? 32 : r.depth();
  o.budget_ms = r.budget_ms() == 0 ? kSweepBudgetMs : r.budget_ms();
  o.size_bytes = r.size_bytes() == 0 ? 64 << 20 : r.size_bytes();
  if (o.step_percent > 100) {
    return absl::InvalidArgumentError("step_percent must be 1..100");
  }
  if (o.depth > 1024)
    return absl::InvalidArgumentError("depth is at most 1024");
  if (o.size_bytes < 16 * kBlock) {
    return absl::InvalidArgumentError("size_bytes must be at least 64 KiB");
  }
  return o;
}

// One IO of the sweep's own, waited for up to a minute. Made and freed
// by the waiting thread: the IO holds the endpoints it was routed with,
// and an endpoint's last reference must not drop on its own completion
// thread (it would join itself). One that does not come back in time is
// left allocated, for a late completion to find.
struct OwnCall {
  Io io;
  std::string data;  // a write's bytes
  Signal done;
};

// On a timeout `call` lets go of it (null after).
absl::Status Call(SSwitch& sw, std::unique_ptr<OwnCall>& call,
                  const std::string& file) {
  call->io.header.source = "sroute:profile";
  call->io.header.file = file;
  if (!call->data.empty()) {
    call->io.write_data = std::span<const char>(call->data);
  }
  OwnCall* raw = call.get();
  raw->io.set_completion([raw](Io&) { raw->done.Notify(); });
  sw.SubmitOwn(&raw->io, file);
  if (!raw->done.WaitFor(std::chrono::seconds(60))) {
    const std::string op(OpName(raw->io.header.op));
    (void)call.release();  // a late completion may still come
    return absl::DeadlineExceededError(
        StrCat(op, " of ", file, " did not come back within 60 s"));
  }
  return raw->io.status;
}

std::unique_ptr<OwnCall> NewCall(Op op) {
  auto call = std::make_unique<OwnCall>();
  call->io.header.op = op;
  return call;
}

struct Step {
  std::vector<double> latencies_us;  // measured ones, sorted
  double served_iops = 0;            // completions per second, measured part
  uint64_t issued = 0;
  uint64_t errors = 0;
  absl::Status first_error;
};

// Runs one step: `rate` Poisson arrivals per second (0: a closed loop of
// `depth`), `write_fraction` writes, at random blocks of the file.
absl::StatusOr<Step> RunStep(SSwitch& sw, const std::string& file,
                             uint64_t blocks, double rate,
                             double write_fraction, const Options& o,
                             uint64_t seed) {
  struct Shared {
    Mutex mu;
    CondVar cv;
    uint32_t in_flight ABSL_GUARDED_BY(mu) = 0;
    Step step ABSL_GUARDED_BY(mu);
    uint64_t measured_done ABSL_GUARDED_BY(mu) = 0;
  };
  auto shared = std::make_shared<Shared>();
  struct Request {
    Io io;
    char buf[kBlock];
    uint64_t planned_ns;
  };
  const uint64_t begin = MonotonicNanos();
  const uint64_t measure_from = begin + uint64_t{o.warmup_ms} * 1'000'000;
  // At least 20 arrivals measured (a slow device's lightest steps), for
  // ten times the step at most.
  uint64_t length_ns = uint64_t{o.step_ms} * 1'000'000;
  if (rate > 0) {
    length_ns = std::clamp(static_cast<uint64_t>(20e9 / rate), length_ns,
                           10 * length_ns);
  }
  const uint64_t end = measure_from + length_ns;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> block(0, blocks - 1);
  std::uniform_real_distribution<double> coin(0, 1);
  std::exponential_distribution<double> gap(rate > 0 ? rate / 1e9 : 1);
  // In flight at most: the closed loop's depth, or (open loop) enough that
  // the offered rate is held while the device keeps up.
  const uint32_t cap =
      rate > 0 ? std::max<uint32_t>(256, o.depth * 8) : o.depth;
  double next = static_cast<double>(begin);
  uint64_t issued = 0;
  for (;;) {
    uint64_t planned = 0;
    if (rate > 0) {
      next += gap(rng);
      planned = static_cast<uint64_t>(next);
      if (planned >= end) break;
      const uint64_t now = MonotonicNanos();
      if (planned > now) {
        std::this_thread::sleep_for(std::chrono::nanoseconds(planned - now));
      }
    }
    {
      MutexLock l(&shared->mu);
      while (shared->in_flight >= cap) shared->cv.Wait(&shared->mu);
      ++shared->in_flight;
    }
    if (rate <= 0) {
      planned = MonotonicNanos();
      if (planned >= end) {
        MutexLock l(&shared->mu);
        --shared->in_flight;
        break;
      }
    }
    auto* r = new Request;
    r->planned_ns = planned;
    ++issued;
    const bool write = coin(rng) < write_fraction;
    r->io.header.source = "sroute:profile";
    r->io.header.file = file;
    r->io.header.op = write ? Op::kWrite : Op::kRead;
    r->io.header.offset = block(rng) * kBlock;
    r->io.header.length = kBlock;
    if (write) {
      std::fill(std::begin(r->buf), std::end(r->buf), 'p');
      r->io.write_data = std::span<const char>(r->buf, kBlock);
    } else {
      r->io.read_buffer = std::span<char>(r->buf, kBlock);
    }
    r->io.set_completion([shared, r, measure_from, end](Io& io) {
      const uint64_t now = MonotonicNanos();
      {
        MutexLock l(&shared->mu);
        if (!io.status.ok()) {
          if (shared->step.errors++ == 0) shared->step.first_error = io.status;
        } else if (r->planned_ns >= measure_from && r->planned_ns < end) {
          shared->step.latencies_us.push_back(
              static_cast<double>(now - r->planned_ns) / 1e3);
        }
        if (now >= measure_from && now < end) ++shared->measured_done;
      }
      // The request goes (its IO holds the endpoints it was routed with)
      // before the step may end: the endpoint's last reference must not
      // be dropped here, on its own completion thread, after the caller
      // let go of it. `shared` outlives the lambda that captured it.
      std::shared_ptr<Shared> keep = shared;
      delete r;
      MutexLock l(&keep->mu);
      --keep->in_flight;
      keep->cv.SignalAll();
    });
    sw.SubmitOwn(&r->io, file);
  }
  // The step's IOs come back before the next begins.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  MutexLock l(&shared->mu);
  while (shared->in_flight > 0) {
    if (shared->cv.WaitUntil(&shared->mu, deadline) ==
            std::cv_status::timeout &&
        shared->in_flight > 0) {
      return absl::DeadlineExceededError(
          StrCat(shared->in_flight, " IOs of the profile sweep to ", file,
                 " did not come back within 30 s"));
    }
  }
  if (shared->step.errors > 0) return shared->step.first_error;
  Step step = std::move(shared->step);
  step.issued = issued;
  std::sort(step.latencies_us.begin(), step.latencies_us.end());
  step.served_iops = static_cast<double>(shared->measured_done) * 1e9 /
                     static_cast<double>(length_ns);
  return step;
}

uint64_t EndpointIosOf(const SSwitch& sw, const std::string& name) {
  for (const auto& [n, ios] : sw.EndpointIos()) {
    if (n == name) return ios;
  }
  return 0;
}

// Makes the file `size` bytes of data (written, not sparse: reads must
// reach the device).
absl::Status Prepare(SSwitch& sw, const std::string& endpoint,
                     const std::string& file, uint64_t size) {
  auto stat = NewCall(Op::kGetattr);
  if (Call(sw, stat, file).ok() &&
      static_cast<uint64_t>(stat->io.attr.st_size) >= size) {
    return absl::OkStatus();
  }
  auto mkdir = NewCall(Op::kMkdir);
  mkdir->io.args.mode = 0700;
  absl::Status s = Call(sw, mkdir, StrCat("//", endpoint, "/.sroute"));
  if (!s.ok() && ErrnoOf(s) != EEXIST) return s;
  auto create = NewCall(Op::kCreate);
  create->io.args.mode = 0600;
  create->io.args.open_flags = O_CREAT | O_WRONLY;
  s = Call(sw, create, file);
  if (!s.ok() && ErrnoOf(s) != EEXIST) return s;
  constexpr uint64_t kChunk = 1 << 20;
  for (uint64_t off = 0; off < size; off += kChunk) {
    auto w = NewCall(Op::kWrite);
    w->data.assign(std::min(kChunk, size - off), 'p');
    w->io.header.offset = off;
    w->io.header.length = static_cast<uint32_t>(w->data.size());
    if (s = Call(sw, w, file); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ProfileSweep(SSwitch& sw, const proto::ProfileEndpoint& request,
                          proto::ProfileProgress* out) {
  auto options = OptionsOf(request);
  if (!options.ok()) return options.status();
  const Options& o = *options;
  const std::string& name = request.endpoint();
  bool known = false;
  for (const auto& [n, e] : sw.Endpoints()) known = known || n == name;
  if (!known) {
    return absl::NotFoundError(StrCat("no endpoint named '", name, "'"));
  }
  proto::DeviceProfile profile = request.so_far();
  profile.set_endpoint(name);
  const uint32_t steps_per_mix = 100 / o.step_percent;
  for (int i = 0; i < profile.mix_size(); ++i) {
    if (static_cast<size_t>(i) >= o.percents.size() ||
        profile.mix(i).write_percent() != o.percents[static_cast<size_t>(i)] ||
        static_cast<uint32_t>(profile.mix(i).point_size()) > steps_per_mix) {
      return absl::InvalidArgumentError(
          "so_far is not a part of this sweep (other mixes or steps)");
    }
  }
  const std::string file = StrCat("//", name, "/", kSweepFile);
  if (absl::Status s = Prepare(sw, name, file, o.size_bytes); !s.ok()) {
    return s;
  }
  const uint64_t blocks = o.size_bytes / kBlock;
  const uint64_t started = MonotonicNanos();
  const uint64_t budget_ns = uint64_t{o.budget_ms} * 1'000'000;
  const uint64_t step_ns = uint64_t{o.warmup_ms + o.step_ms} * 1'000'000;
  uint64_t foreign = 0;
  bool worked = false;
  for (size_t m = 0; m < o.percents.size(); ++m) {
    if (static_cast<int>(m) == profile.mix_size()) {
      if (worked && MonotonicNanos() - started + step_ns > budget_ns) break;
      auto peak =
          RunStep(sw, file, blocks, 0, o.percents[m] / 100.0, o, 1000 + m);
      if (!peak.ok()) return peak.status();
      if (peak->served_iops <= 0) {
        return absl::UnavailableError(StrCat("endpoint ", name,
                                             " served no IO in ", o.step_ms,
                                             " ms at depth ", o.depth));
      }
      worked = true;
      auto* mix = profile.add_mix();
      mix->set_write_percent(o.percents[m]);
      mix->set_peak_iops(peak->served_iops);
    }
    auto* mix = profile.mutable_mix(static_cast<int>(m));
    while (static_cast<uint32_t>(mix->point_size()) < steps_per_mix) {
      if (worked && MonotonicNanos() - started + step_ns > budget_ns) break;
      const uint32_t k = static_cast<uint32_t>(mix->point_size()) + 1;
      const double rate = mix->peak_iops() * k * o.step_percent / 100.0;
      absl::StatusOr<Step> step;
      // A step others' IOs disturbed runs again, twice at most.
      for (int attempt = 0; attempt < 3; ++attempt) {
        const uint64_t before = EndpointIosOf(sw, name);
        step = RunStep(sw, file, blocks, rate, o.percents[m] / 100.0, o,
                       m * 1000 + k * 10 + static_cast<uint64_t>(attempt));
        if (!step.ok()) return step.status();
        const uint64_t seen = EndpointIosOf(sw, name) - before;
        const uint64_t others = seen > step->issued ? seen - step->issued : 0;
        foreign += others;
        if (others * 100 <= step->issued) break;  // 1 % is noise
      }
      worked = true;
      auto* pt = mix->add_point();
      pt->set_iops(rate);
      if (step->latencies_us.empty() && mix->point_size() > 1) {
        // Nothing measured (a step too short for its rate): as the one
        // before.
        const auto& before = mix->point(mix->point_size() - 2);
        pt->set_p50_us(before.p50_us());
        pt->set_p90_us(before.p90_us());
        pt->set_p99_us(before.p99_us());
      } else {
        // At least a microsecond: a profile's latencies are positive.
        pt->set_p50_us(
            std::max(1.0, QuantileOfSorted(step->latencies_us, 0.50)));
        pt->set_p90_us(
            std::max(pt->p50_us(), QuantileOfSorted(step->latencies_us, 0.90)));
        pt->set_p99_us(
            std::max(pt->p90_us(), QuantileOfSorted(step->latencies_us, 0.99)));
      }
    }
    if (static_cast<uint32_t>(mix->point_size()) < steps_per_mix) break;
  }
  uint32_t done_steps = 0;
  for (const auto& mix : profile.mix()) {
    done_steps += 1 + static_cast<uint32_t>(mix.point_size());
  }
  const uint32_t total =
      static_cast<uint32_t>(o.percents.size()) * (steps_per_mix + 1);
  out->set_steps_done(done_steps);
  out->set_steps_total(total);
  out->set_foreign_ios(foreign);
  out->set_done(done_steps == total);
  if (out->done()) {
    profile.set_measured_unix_s(absl::ToUnixSeconds(absl::Now()));
    profile.set_how(StrCat("route: steps of ", o.step_percent, "% of peak, ",
                           o.step_ms, " ms each after ", o.warmup_ms,
                           " ms, peak at depth ", o.depth, ", ",
                           o.size_bytes >> 20, " MiB file"));
    // A file left behind is only space (the next sweep takes it).
    auto unlink = NewCall(Op::kUnlink);
    (void)Call(sw, unlink, file);
  }
  *out->mutable_profile() = std::move(profile);
  return absl::OkStatus();
}

}  // namespace sroute

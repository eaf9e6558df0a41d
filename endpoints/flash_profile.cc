// SPDX-License-Identifier: Apache-2.0
#include "endpoints/flash_profile.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <random>

#include "util/quantile.h"
#include "util/strings.h"

namespace sroute {
namespace {

struct Sweeper {
  FlashModel model;
  std::mt19937_64 rng;
  uint64_t pages;  // the pages the sweep reads and writes

  // One IO at model time `now` (ns); returns when it ends.
  uint64_t Issue(double write_fraction, uint64_t now) {
    std::uniform_int_distribution<uint64_t> page(0, pages - 1);
    const bool write =
        std::uniform_real_distribution<double>(0, 1)(rng) < write_fraction;
    const uint64_t lpn = page(rng);
    return write ? model.Write(lpn, now).done_ns : model.Read(lpn, now).done_ns;
  }

  // Requests per second a closed loop of `depth` sustains.
  double Peak(double write_fraction, uint32_t depth, uint32_t ios) {
    model.ForgetTime();
    std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> due;
    for (uint32_t i = 0; i < depth; ++i) due.push(Issue(write_fraction, 0));
    uint64_t last = 0;
    for (uint32_t i = depth; i < ios; ++i) {
      const uint64_t now = due.top();
      due.pop();
      last = now;
      due.push(Issue(write_fraction, now));
    }
    return last == 0 ? 0 : (ios - depth) * 1e9 / static_cast<double>(last);
  }

  // Latencies (us, sorted) of `ios` Poisson arrivals at `iops`.
  std::vector<double> Step(double write_fraction, double iops, uint32_t ios) {
    model.ForgetTime();
    std::exponential_distribution<double> gap(iops / 1e9);
    std::vector<double> us;
    us.reserve(ios);
    double at = 0;
    for (uint32_t i = 0; i < ios; ++i) {
      at += gap(rng);
      const uint64_t now = static_cast<uint64_t>(at) + 1;
      us.push_back(static_cast<double>(Issue(write_fraction, now) - now) / 1e3);
    }
    std::sort(us.begin(), us.end());
    return us;
  }
};

}  // namespace

proto::DeviceProfile ProfileModel(const FlashOptions& options,
                                  const ModelSweep& sweep) {
  Sweeper s{FlashModel(options), std::mt19937_64(sweep.seed), 0};
  s.pages = std::max<uint64_t>(
      1, static_cast<uint64_t>(static_cast<double>(s.model.logical_pages()) *
                               sweep.fill));
  // Written once in order, then over-written at random as many times
  // again: the device is in its steady state (GC reclaims as it writes)
  // before the first step, not when some step happens to fill it.
  for (uint64_t lpn = 0; lpn < s.pages; ++lpn) s.model.Write(lpn, 0);
  for (uint64_t i = 0; i < s.pages; ++i) {
    s.model.ForgetTime();
    s.model.Write(
        std::uniform_int_distribution<uint64_t>(0, s.pages - 1)(s.rng), 0);
  }
  proto::DeviceProfile out;
  out.set_how(StrCat("model: steps of ", sweep.step_percent, "% of peak, ",
                     sweep.ios_per_step, " IOs each, peak at depth ",
                     sweep.depth, ", ", sweep.fill * 100, "% filled"));
  for (uint32_t percent : sweep.write_percents) {
    const double w = percent / 100.0;
    auto* mix = out.add_mix();
    mix->set_write_percent(percent);
    const double peak = s.Peak(w, sweep.depth, sweep.ios_per_step);
    mix->set_peak_iops(peak);
    for (uint32_t step = sweep.step_percent; step <= 100;
         step += sweep.step_percent) {
      const double iops = peak * step / 100.0;
      const std::vector<double> us = s.Step(w, iops, sweep.ios_per_step);
      auto* pt = mix->add_point();
      pt->set_iops(iops);
      pt->set_p50_us(QuantileOfSorted(us, 0.50));
      pt->set_p90_us(QuantileOfSorted(us, 0.90));
      pt->set_p99_us(QuantileOfSorted(us, 0.99));
    }
  }
  return out;
}

proto::DeviceProfile DilateProfile(proto::DeviceProfile profile,
                                   double dilation) {
  for (auto& mix : *profile.mutable_mix()) {
    mix.set_peak_iops(mix.peak_iops() / dilation);
    for (auto& pt : *mix.mutable_point()) {
      pt.set_iops(pt.iops() / dilation);
      pt.set_p50_us(pt.p50_us() * dilation);
      pt.set_p90_us(pt.p90_us() * dilation);
      pt.set_p99_us(pt.p99_us() * dilation);
    }
  }
  if (dilation != 1) {
    profile.set_how(StrCat(profile.how(), ", dilated ", dilation, "x"));
  }
  return profile;
}

}  // namespace sroute

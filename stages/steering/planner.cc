// SPDX-License-Identifier: Apache-2.0
#include "stages/steering/planner.h"

#include <algorithm>
#include <numeric>

namespace sroute {

std::vector<double> BalanceLoad(
    const std::vector<std::function<double(double)>>& latency, double demand,
    const std::vector<double>& peak, double step, uint32_t max_steps,
    double* worst_us, uint32_t* steps) {
  const size_t n = latency.size();
  std::vector<double> load(n, n == 0 ? 0 : demand / static_cast<double>(n));
  // Latency, with a tie-breaker far below a microsecond: the member's
  // utilization. Where profiles are flat (light loads), moves then level
  // utilization instead of stopping at once.
  auto key = [&](size_t i, double l) {
    const double util = peak.empty() || peak[i] <= 0 ? 0 : l / peak[i];
    return latency[i](l) + 1e-3 * util;
  };
  std::vector<double> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = key(i, load[i]);
  uint32_t taken = 0;
  while (n >= 2 && taken < max_steps) {
    const size_t worst =
        static_cast<size_t>(std::max_element(k.begin(), k.end()) - k.begin());
    const size_t best =
        static_cast<size_t>(std::min_element(k.begin(), k.end()) - k.begin());
    const double moved = load[worst] * step;
    if (worst == best || moved <= demand * 1e-9) break;
    const double worst_after = key(worst, load[worst] - moved);
    const double best_after = key(best, load[best] + moved);
    // Only a move that lowers the worse of the two is taken: the members'
    // latencies come level, and the search stops where no move helps.
    if (std::max(worst_after, best_after) >= k[worst]) break;
    load[worst] -= moved;
    load[best] += moved;
    k[worst] = worst_after;
    k[best] = best_after;
    ++taken;
  }
  if (worst_us != nullptr) {
    double worst = 0;
    for (size_t i = 0; i < n; ++i) worst = std::max(worst, latency[i](load[i]));
    *worst_us = worst;
  }
  if (steps != nullptr) *steps = taken;
  return load;
}

namespace {

// A device's profile scaled to the share of its capacity it has now
// (SteeringDevice::capacity_share): rates times the share, latency at the
// load over it.
double ShareOf(const SteeringDevice& d) {
  return std::clamp(d.capacity_share, 0.01, 1.0);
}
// Under this share of its capacity a member is congested (AIMD cut it at
// least once and it has not recovered): it joins the write window last.
constexpr double kCongestedShare = 0.5;
double PeakOf(const SteeringDevice& d, double write_fraction) {
  return d.profile->PeakIops(write_fraction) * ShareOf(d);
}
double CapacityOf(const SteeringDevice& d, double write_fraction,
                  const SteeringOptions& o) {
  return d.profile->Capacity(write_fraction, o.target_us, o.percentile) *
         ShareOf(d);
}
double LatencyOf(const SteeringDevice& d, double load, double write_fraction,
                 const SteeringOptions& o) {
  return d.profile->LatencyUs(load / ShareOf(d), write_fraction, o.percentile);
}

// Shares of `demand` over the devices picked by `take`, at `write_fraction`:
// hill-climbing, or in proportion to peak IOPS past `fallback_load`.
std::vector<double> Shares(const std::vector<SteeringDevice>& devices,
                           const std::vector<bool>& take, double demand,
                           double write_fraction, const SteeringOptions& o,
                           bool* fallback, double* worst_us, uint32_t* steps) {
  std::vector<double> share(devices.size(), 0);
  std::vector<size_t> index;
  double peak = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!take[i]) continue;
    index.push_back(i);
    peak += PeakOf(devices[i], write_fraction);
  }
  if (index.empty()) return share;
  auto proportional = [&](auto&& of) {
    double total = 0;
    for (size_t i : index) total += of(devices[i]);
    for (size_t i : index) {
      share[i] = total > 0 ? of(devices[i]) / total
                           : 1.0 / static_cast<double>(index.size());
    }
  };
  if (demand >= o.fallback_load * peak) {
    *fallback = true;
    proportional(
        [&](const SteeringDevice& d) { return PeakOf(d, write_fraction); });
  } else if (demand <= 0) {
    // No load to weigh by: what each serves within the target.
    proportional([&](const SteeringDevice& d) {
      return CapacityOf(d, write_fraction, o);
    });
  } else {
    std::vector<std::function<double(double)>> latency;
    std::vector<double> peaks;
    for (size_t i : index) {
      const SteeringDevice* d = &devices[i];
      latency.push_back([d, write_fraction, &o](double load) {
        return LatencyOf(*d, load, write_fraction, o);
      });
      peaks.push_back(PeakOf(*d, write_fraction));
    }
    std::vector<double> load = BalanceLoad(latency, demand, peaks, o.step,
                                           o.max_steps, worst_us, steps);
    for (size_t j = 0; j < index.size(); ++j)
      share[index[j]] = load[j] / demand;
    return share;
  }
  double worst = 0;
  for (size_t i : index) {
    worst = std::max(
        worst, LatencyOf(devices[i], share[i] * demand, write_fraction, o));
  }
  *worst_us = worst;
  return share;
}

}  // namespace

SteeringPlan PlanSteering(const std::vector<SteeringDevice>& devices,
                          double read_iops, double write_iops, uint32_t start,
                          const SteeringOptions& o) {
  SteeringPlan plan;
  const uint32_t n = static_cast<uint32_t>(devices.size());
  plan.write_mode.assign(n, false);
  std::vector<bool> up(n);
  uint32_t up_count = 0;
  for (uint32_t i = 0; i < n; ++i) {
    up[i] = devices[i].up;
    up_count += up[i] ? 1 : 0;
  }
  if (up_count == 0) {
    plan.read_share.assign(n, 0);
    plan.write_share.assign(n, 0);
    return plan;
  }
  plan.window_start = n == 0 ? 0 : start % n;
  const double device_writes = write_iops * o.k;
  if (!o.segregate || up_count <= o.k) {
    // Every member takes both, weighed on the whole mix.
    plan.segregated = false;
    const double demand = read_iops + device_writes;
    const double w = demand > 0 ? device_writes / demand : 0;
    plan.write_mode = up;
    plan.window_size = up_count;
    uint32_t steps = 0;
    double worst = 0;
    plan.read_share =
        Shares(devices, up, demand, w, o, &plan.fallback, &worst, &steps);
    plan.write_share = plan.read_share;
    plan.read_latency_us = plan.write_latency_us = worst;
    plan.steps = steps;
    return plan;
  }
  // The window: around the ring from `start`, members that are up, until
  // their write capacity covers the writes (and at least k). Members
  // congested now (their share under half: collecting) come last: every
  // write waits for each of its copies, and one on a collecting member
  // waits for its erases.
  double capacity = 0;
  uint32_t size = 0;
  for (const bool congested : {false, true}) {
    for (uint32_t j = 0; j < n && (size < o.k || capacity < device_writes);
         ++j) {
      const uint32_t i = (plan.window_start + j) % n;
      if (!up[i] || plan.write_mode[i] ||
          (ShareOf(devices[i]) < kCongestedShare) != congested) {
        continue;
      }
      plan.write_mode[i] = true;
      ++size;
      capacity += CapacityOf(devices[i], 1.0, o);
    }
  }
  plan.window_size = size;
  std::vector<bool> readers(n);
  for (uint32_t i = 0; i < n; ++i) readers[i] = up[i] && !plan.write_mode[i];
  if (size == up_count) readers = up;  // no reader left: all read
  uint32_t read_steps = 0, write_steps = 0;
  bool read_fallback = false, write_fallback = false;
  plan.read_share = Shares(devices, readers, read_iops, 0, o, &read_fallback,
                           &plan.read_latency_us, &read_steps);
  plan.write_share =
      Shares(devices, plan.write_mode, device_writes, 1.0, o, &write_fallback,
             &plan.write_latency_us, &write_steps);
  plan.fallback = read_fallback || write_fallback;
  plan.steps = read_steps + write_steps;
  // Segregation takes the window's members from the reads: in a small pool
  // (four members, two copies) that can be half of it. When the segregated
  // plan misses the target and every member taking both is expected to do
  // better, every member takes both.
  const double worst = std::max(plan.read_latency_us, plan.write_latency_us);
  if (worst > o.target_us) {
    SteeringOptions mixed_options = o;
    mixed_options.segregate = false;
    SteeringPlan mixed =
        PlanSteering(devices, read_iops, write_iops, start, mixed_options);
    if (mixed.read_latency_us < worst) {
      mixed.window_start = plan.window_start;
      mixed.segregated = false;
      return mixed;
    }
  }
  return plan;
}

double IdealIops(const std::vector<SteeringDevice>& devices,
                 double write_fraction, const SteeringOptions& o) {
  double total = 0;
  for (const SteeringDevice& d : devices) {
    if (d.up) {
      total += CapacityOf(d, write_fraction, o);
    }
  }
  return total;
}

}  // namespace sroute

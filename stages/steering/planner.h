// SPDX-License-Identifier: Apache-2.0
// The steering app's plan for one epoch (issue 49, Sandook NSDI'26 §7.1,
// §7.2): which members of a replica set take writes (the write-mode
// window) and what share of the reads and of the writes each member gets
// (routing weights), from the members' profiles and the load they saw.
//
//  - Window: the fewest members, at least k, counted around the ring from
//    `start`, whose write capacity within the latency target covers the
//    write demand times k (each write lands on k of them). The app moves
//    `start` by one every epoch, so that every device takes its turn at
//    writes (wear). With too little capacity anywhere, every member is in
//    it (no segregation). A member congested now (its capacity share
//    under half) joins the window only when the others do not cover it:
//    a write waits for every copy. Beyond Sandook: when the segregated plan is
//    expected to miss the target and every member taking both is expected
//    to do better (a small pool, where the window is half of it), every
//    member takes both.
//  - Weights: hill-climbing on the expected latency (the profile's at the
//    load the share gives): start even, then move 1 % of the worst
//    member's load to the best one while that lowers the worse of the two,
//    which brings the members' latencies level (min-max). When the demand
//    reaches `fallback_load` of the members' peak rate, the profiles no
//    longer tell (every member is past its knee): shares in proportion to
//    peak IOPS.
//
// Pure functions of their arguments: thread-safe.
#ifndef SROUTE_STAGES_STEERING_PLANNER_H_
#define SROUTE_STAGES_STEERING_PLANNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "stages/steering/profile.h"

namespace sroute {

struct SteeringDevice {
  std::string name;
  std::shared_ptr<const Profile> profile;  // REQUIRES: not null
  bool up = true;  // a member out of the set takes nothing
  // The share of its profile's capacity it has now, in [0.01, 1]: a member
  // its host marks congested (GC) is planned as a smaller device (the
  // stage's AIMD multiplier), and the others are weighed among themselves.
  double capacity_share = 1;
};

struct SteeringOptions {
  uint32_t k = 2;  // copies of each write
  double target_us = 1000;
  Percentile percentile = Percentile::kP90;
  double step = 0.01;  // of the worst member's load, per hill-climbing step
  double fallback_load = 0.95;
  uint32_t max_steps = 100'000;
  // false: no window; every member takes reads and writes, weighed on the
  // whole mix (the policies without segregation).
  bool segregate = true;
};

struct SteeringPlan {
  uint32_t window_start = 0;
  uint32_t window_size = 0;         // members in write mode
  std::vector<bool> write_mode;     // per device
  std::vector<double> read_share;   // per device; sums to 1 (0 if none)
  std::vector<double> write_share;  // per device; sums to 1 (0 if none)
  bool fallback = false;
  double read_latency_us = 0;   // the worst expected of those that read
  double write_latency_us = 0;  // of those that write
  uint32_t steps = 0;           // hill-climbing steps taken
  // false: every member takes reads and writes (segregation off, too few
  // members, or expected to miss the target where mixing would not).
  bool segregated = true;
};

// `read_iops`, `write_iops`: the demand (client requests per second).
SteeringPlan PlanSteering(const std::vector<SteeringDevice>& devices,
                          double read_iops, double write_iops, uint32_t start,
                          const SteeringOptions& options);

// Splits `demand` over members whose expected latency at a load is
// `latency[i](load)` (non-decreasing): hill-climbing as above. Where the
// latencies tie (profiles are flat at light loads), utilization (load over
// `peak[i]`; empty: none) decides, so load still goes where there is room.
// Returns the loads; `worst_us` the worst latency expected, `steps` the
// moves made.
std::vector<double> BalanceLoad(
    const std::vector<std::function<double(double)>>& latency, double demand,
    const std::vector<double>& peak, double step, uint32_t max_steps,
    double* worst_us, uint32_t* steps);

// The most requests per second the devices serve at `write_fraction`
// within the target (each at its own capacity: what a perfect split
// gets; the benchmarks' "ideal").
double IdealIops(const std::vector<SteeringDevice>& devices,
                 double write_fraction, const SteeringOptions& options);

}  // namespace sroute

#endif  // SROUTE_STAGES_STEERING_PLANNER_H_

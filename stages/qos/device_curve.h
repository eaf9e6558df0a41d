// SPDX-License-Identifier: Apache-2.0
// A device's latency curve for the `qos` stage and the slo_admission app
// (issue 48): the weighted IOPS (tokens/s) the device serves while its p95
// latency stays within a target, for a few targets, with a column for a
// read-only load (a device serves more reads when nothing writes). ReFlex
// (ASPLOS'17, §3.1) calibrates the same table: a write costs `write_cost`
// read tokens, the value that makes the curves of p95 against weighted IOPS
// of every read/write mix collapse onto one.
//
//   std::vector<CalibrationSample> samples = ...;   // a sweep's points
//   double c = FitWriteCost(samples);
//   DeviceCurve curve = BuildCurve(samples, c, {absl::Milliseconds(1), ...});
//   CurveRate r = RateAt(curve.points, absl::Microseconds(500));
//
// Pure functions of their arguments: thread-safe.
#ifndef SROUTE_STAGES_QOS_DEVICE_CURVE_H_
#define SROUTE_STAGES_QOS_DEVICE_CURVE_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/config.pb.h"

namespace sroute {

struct QosCurvePoint {
  absl::Duration p95;                 // the latency target
  double tokens_per_s = 0;            // any mix, writes weighted
  double read_only_tokens_per_s = 0;  // reads only (0: not measured)
};

// A stage's curve (proto QosOptions.curve), ordered by target.
std::vector<QosCurvePoint> CurveOf(const proto::QosOptions& options);

// InvalidArgument unless the points' targets are positive and strictly
// increasing, and their rates positive and not decreasing.
absl::Status CheckCurve(const std::vector<QosCurvePoint>& points);

struct CurveRate {
  double tokens_per_s = 0;
  double read_only_tokens_per_s = 0;
  // The target is stricter than the curve's first point: the device is
  // not known to meet it at any load (the rate given is the first point's).
  bool below_curve = false;
};

// The rates at target `p95`, linear between the points around it, the
// last point's above it. An empty curve gives zeros.
// REQUIRES: CheckCurve(points).ok().
CurveRate RateAt(const std::vector<QosCurvePoint>& points, absl::Duration p95);

// One step of a calibration sweep: the load offered at a mix, and the p95
// latency it saw.
struct CalibrationSample {
  double write_fraction = 0;  // of the requests, 0..1
  double iops = 0;            // 4 KiB requests per second, as served
  absl::Duration p95;
};

// The write cost in read tokens (within [min_cost, max_cost]) that makes
// the mixes with writes serve, within the same p95 targets, the weighted
// IOPS the read-only mix serves: targets are the read-only sweep's p95 at
// 50, 70 and 90 % of its peak (the knee, where a device's costs show), and
// C minimizes the squares of iops_w(T) x (1 - w + w x C) - iops_0(T) over
// mixes and targets (linear in C). Without a read-only sweep of two
// samples or more, or without mixes with writes, returns `min_cost`.
double FitWriteCost(const std::vector<CalibrationSample>& samples,
                    double min_cost = 1, double max_cost = 50);

// A calibration's result: the fitted write cost and the table.
struct DeviceCurve {
  double write_cost = 1;
  std::vector<QosCurvePoint> points;
};

// For each target of `targets` (ascending) that some mixed sweep meets at
// its lowest load: tokens_per_s is the least, over the mixes with writes, of
// the highest weighted IOPS whose p95 stays within the target (linear
// between the samples around it); read_only_tokens_per_s the same of the
// read-only mix. Rates are made non-decreasing in the target, and a point
// that adds nothing to the one before (the same rates) is left out.
DeviceCurve BuildCurve(const std::vector<CalibrationSample>& samples,
                       double write_cost,
                       const std::vector<absl::Duration>& targets);

}  // namespace sroute

#endif  // SROUTE_STAGES_QOS_DEVICE_CURVE_H_

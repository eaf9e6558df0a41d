// SPDX-License-Identifier: Apache-2.0
// `sroutectl qos calibrate PATH`: measures a device's latency curve for the
// qos stage (issue 48) through whatever route PATH takes (a file of a
// volume: the rules, stages and servers on the way to the device are
// measured with it). For each read/write mix it finds the peak rate with a
// closed loop, then offers open-loop Poisson load at fractions of it; each
// request's latency counts from its planned arrival, so queueing is in it.
// The write cost is fitted so the mixes' p95 curves collapse onto the
// read-only one (stages/qos/device_curve.h), and the curve is the rate
// within each p95 target.
//
// PATH must not exist: it is made, filled and removed at the end (nothing
// of a user's is touched). Run it at idle, before tenants are registered
// on the device (a qos stage with latency-critical tenants limits the
// load, and the sweep would measure the limit).
#ifndef SROUTE_TOOLS_SROUTECTL_CALIBRATE_H_
#define SROUTE_TOOLS_SROUTECTL_CALIBRATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/cli_json.pb.h"

namespace sroute::ctl {

struct CalibrateOptions {
  std::string path;
  uint64_t size_bytes = 64 << 20;
  uint32_t step_ms = 1000;
  // Each step runs this long before it is measured (a device's write
  // buffer fills, its queues settle).
  uint32_t warmup_ms = 1000;
  uint32_t depth = 16;  // requests in flight at most (threads)
  std::vector<uint32_t> write_percents = {0, 10, 25, 50};
  uint32_t loads = 10;  // open-loop steps per mix, up to its peak
  std::vector<uint32_t> targets_us = {200,   500,   1000,  2000,   5000,
                                      10000, 20000, 50000, 100000, 200000};
};

// InvalidArgument for options out of range, AlreadyExists if PATH exists,
// the IO error (with its errno text) if the file cannot be made or IO
// fails.
absl::StatusOr<proto::CtlQosCalibration> Calibrate(const CalibrateOptions& o);

// The report as text: the fit, the table, the stage options.
std::string CalibrationText(const proto::CtlQosCalibration& c);

}  // namespace sroute::ctl

#endif  // SROUTE_TOOLS_SROUTECTL_CALIBRATE_H_

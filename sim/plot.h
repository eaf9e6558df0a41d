// SPDX-License-Identifier: Apache-2.0
// Plots of a sroute-sim report, as SVG files people open in a browser:
//   DIR/latency_cdf.svg   each flow's read and write latency CDF (log x,
//                         the tail stretched: 0.9, 0.99, 0.999 evenly)
//   DIR/throughput.svg    each flow's IOs per second over the run, the
//                         apps' decisions as marked vertical lines
//   DIR/decisions.svg     the apps' decisions on a timeline, a row per host
// drawn from the report's curves (sim::SimOptions::curves).
//
//   absl::Status s = sim::WritePlots(report, "out/plots");
//
// Thread-safe (no state).
#ifndef SROUTE_SIM_PLOT_H_
#define SROUTE_SIM_PLOT_H_

#include <string>

#include "absl/status/status.h"
#include "proto/sim.pb.h"

namespace sroute::sim {

// Writes the plots of `report` into `dir` (made if missing). An IO error
// names the file. FailedPrecondition when the report has no curves.
absl::Status WritePlots(const proto::SimReport& report, const std::string& dir);

}  // namespace sroute::sim

#endif  // SROUTE_SIM_PLOT_H_

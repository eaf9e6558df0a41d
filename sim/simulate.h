// SPDX-License-Identifier: Apache-2.0
// A scenario run end to end: its requests drawn, then SNIS's
// storage-network iteration (Eq. 1-4 of the paper): every pass runs all
// requests through storage, then through the network; a read reaches
// storage at its issue time and the network when storage is done; a write
// reaches the network at its issue time and storage when the previous
// pass's network was done (in the first pass, its issue time plus its
// transfer's time on idle links: NetworkSim::IdleNs). Passes
// repeat until the criterion (the mean relative distance of the mean,
// median and p90 per-request throughput from the pass before) is under
// sigma, or has moved by at most tau for n passes, or max_iterations.
//
//   absl::StatusOr<proto::SimReport> report = sim::Simulate(layout);
//
// Thread-compatible: Simulate forks a child for the run (SimGrid keeps one
// engine per process), so call it from a process with one thread.
#ifndef SROUTE_SIM_SIMULATE_H_
#define SROUTE_SIM_SIMULATE_H_

#include "absl/status/statusor.h"
#include "proto/sim.pb.h"
#include "sim/scenario.h"

namespace sroute::sim {

struct SimOptions {
  // The flows' curves in the report (latency CDFs, IOs over time): what
  // plots are drawn from (sim/plot.h).
  bool curves = false;
};

// Runs `layout` in a child process and returns its report.
absl::StatusOr<proto::SimReport> Simulate(const Layout& layout,
                                          const SimOptions& options = {});

// The same in this process: once per process (the network's engine).
absl::StatusOr<proto::SimReport> SimulateHere(const Layout& layout,
                                              const SimOptions& options = {});

}  // namespace sroute::sim

#endif  // SROUTE_SIM_SIMULATE_H_

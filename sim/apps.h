// SPDX-License-Identifier: Apache-2.0
// The control applications of a scenario (its `apps`), run on virtual time:
// the project's own apps, made by name as `sroute-controller --app` makes
// them, through a simulated ControllerApi. Its hosts are the scenario's
// (each reaches every server); each host's rules are the scenario's plus
// what the apps change; Stats gives, every stats interval, each host's
// per-rule counts, latencies and IOs in flight as the pass computed them;
// Update changes the rules from that instant; a reclaim (Copy RECLAIM)
// moves what writes took away at its rate and ends when nothing is left.
// Quiesce and Drain succeed at once; stages and profiles are not simulated
// (Unimplemented).
//
// How this joins SNIS's iteration (sim/simulate.h): a pass routes every IO
// by the changes the apps made in the pass before, then replays the apps
// from time 0 over the pass's results. The replay stops at the first change
// that differs from those the pass was routed by: the statistics after it
// describe routes the apps did not choose. Causality makes this settle:
// what the apps see before a change does not depend on it, so each pass
// fixes at least the next change in time, and the iteration ends only when
// a replay makes exactly the changes its pass was routed by.
//
//   absl::StatusOr<sim::AppReplay> r =
//       sim::ReplayApps(layout, requests, end_ns, routed_by, away);
//
// Not thread-safe (runs on the simulation's thread).
#ifndef SROUTE_SIM_APPS_H_
#define SROUTE_SIM_APPS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/scenario.h"
#include "sim/workload.h"

namespace sroute::sim {

// How a pass carried out the reclaims its timeline started, by the index
// of each start in that timeline: when each chunk's write ended and what
// it moved, what there was to move, and whether all of it was moved
// before the run's end.
struct CopyProgress {
  std::vector<std::pair<uint64_t, uint64_t>> writes;  // end_ns, bytes
  uint64_t total_bytes = 0;
  bool complete = false;
};
using CopyLog = std::map<size_t, CopyProgress>;

struct AppReplay {
  // The changes the apps made, in order of time (up to the first that
  // differs from the ones the pass was routed by, that one included).
  std::vector<RuleChange> timeline;
  // Whether they are exactly the changes the pass was routed by.
  bool settled = false;
  // Each app's own account of its decisions ("APP: LINE").
  std::vector<std::string> notes;
};

// Replays the scenario's apps over a pass: `requests` (routed by
// `routed_by`) reached their sSwitch at `start_ns[i]` (empty: at their
// arrival) and ended at `end_ns[i]`; `away` is the routing's log of pages
// writes took away; `copies` how the pass copied the reclaims `routed_by`
// started (a reclaim the pass did not copy moves at its rate). An app
// whose Start fails stops the replay with its error ("apps[I]: ...").
absl::StatusOr<AppReplay> ReplayApps(const Layout& layout,
                                     const std::vector<Request>& requests,
                                     const std::vector<uint64_t>& start_ns,
                                     const std::vector<uint64_t>& end_ns,
                                     const std::vector<RuleChange>& routed_by,
                                     const std::vector<AwayEvent>& away,
                                     const CopyLog& copies);

}  // namespace sroute::sim

#endif  // SROUTE_SIM_APPS_H_

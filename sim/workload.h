// SPDX-License-Identifier: Apache-2.0
// The requests a scenario's flows issue, drawn once from its seed: open-loop
// Poisson arrivals per host (times the bursts' factors), reads and writes
// by the flow's mix, addresses uniform or Zipfian over the flow's file.
// A flow that names a file is routed by its host's rules (sim/routing.h):
// the scenario's, changed over time by the apps (a timeline of changes);
// otherwise an address's 1 MiB stripe picks its server among the flow's by
// hash. The stripe then picks the device, and the offset the page.
//
//   absl::StatusOr<std::vector<sim::Io>> ios = sim::DrawIos(layout);
//   absl::StatusOr<std::vector<sim::Request>> r =
//       sim::RouteIos(layout, *ios, timeline, &away_log);
//
// Thread-safe (no state).
#ifndef SROUTE_SIM_WORKLOAD_H_
#define SROUTE_SIM_WORKLOAD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/scenario.h"

namespace sroute::sim {

// The devices' page: requests are whole pages.
inline constexpr uint64_t kSimPageBytes = 4096;

// An IO a flow's host issues.
struct Io {
  uint64_t arrival_ns;
  uint64_t offset;  // in the flow's file
  uint32_t flow;
  uint32_t host;
  uint32_t bytes;
  bool read;
};

// A change of one host's rules at a time: an app's update (rules inserted,
// cids removed), or the end of a reclaim (the bytes of files named
// `reclaimed...` that writes took away are home again).
struct RuleChange {
  uint64_t at_ns;
  uint32_t host;
  std::string app;
  std::vector<SimRule> insert;
  std::vector<uint64_t> remove;
  std::string reclaimed;
  bool operator==(const RuleChange& o) const;
};

// The writes that took pages of routed files away (track_writes) or
// brought them home, in order of time: what a reclaim has to move.
struct AwayEvent {
  uint64_t at_ns;
  uint32_t host;
  bool away;  // false: home
  std::string file;
  uint64_t page;  // 4 KiB page of the file
};

struct Request {
  uint64_t arrival_ns;  // A(r): when the host issues it
  // The IO it is part of (its index in DrawIos's): a routed IO split by
  // byte-ranged rules, or a write scattered to several targets, is several
  // requests; the IO ends when its last one does.
  uint64_t io;
  uint64_t rule;  // the cid of the rule that routed it (0: none)
  uint64_t page;  // its first 4 KiB page on the device
  uint32_t flow;
  uint32_t host;    // index in Layout::hosts
  uint32_t server;  // index in Layout::servers
  uint32_t device;  // on the server
  uint32_t bytes;
  bool read;
};

// The pages each device of `preset` holds (4 KiB each).
uint64_t DevicePages(const std::string& preset);

// Every IO of every flow within the scenario's duration, in order of
// arrival (ties by flow, then host).
std::vector<Io> DrawIos(const Layout& layout);

// The requests of `ios`, in their order, each host's IOs routed by its
// rules as `timeline` (in order of time) changes them; `away`, if not
// null, gets the pages writes took away and brought home. InvalidArgument
// when a routed IO goes to an endpoint that is no server, or a change's
// rules do not make a table.
absl::StatusOr<std::vector<Request>> RouteIos(
    const Layout& layout, const std::vector<Io>& ios,
    const std::vector<RuleChange>& timeline, std::vector<AwayEvent>* away);

// DrawIos routed by the scenario's rules alone.
absl::StatusOr<std::vector<Request>> DrawRequests(const Layout& layout);

}  // namespace sroute::sim

#endif  // SROUTE_SIM_WORKLOAD_H_

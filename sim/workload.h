// SPDX-License-Identifier: Apache-2.0
// The requests a scenario's flows issue, drawn once from its seed: open-loop
// Poisson arrivals per host (times the bursts' factors), reads and writes
// by the flow's mix, addresses uniform or Zipfian over the flow's file.
// A flow that names a file is routed by the scenario's rules (sim/routing.h);
// otherwise an address's 1 MiB stripe picks its server among the flow's by
// hash. The stripe then picks the device, and the offset the page.
//
//   absl::StatusOr<std::vector<sim::Request>> r = sim::DrawRequests(layout);
//
// Thread-safe (no state).
#ifndef SROUTE_SIM_WORKLOAD_H_
#define SROUTE_SIM_WORKLOAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/scenario.h"

namespace sroute::sim {

// The devices' page: requests are whole pages.
inline constexpr uint64_t kSimPageBytes = 4096;

struct Request {
  uint64_t arrival_ns;  // A(r): when the host issues it
  // The IO it is part of: a routed IO split by byte-ranged rules, or a
  // write scattered to several targets, is several requests; the IO ends
  // when its last one does.
  uint64_t io;
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

// Every request of every flow within the scenario's duration, in order of
// arrival (ties by flow, then host). InvalidArgument when a routed IO goes
// to an endpoint that is no server.
absl::StatusOr<std::vector<Request>> DrawRequests(const Layout& layout);

}  // namespace sroute::sim

#endif  // SROUTE_SIM_WORKLOAD_H_

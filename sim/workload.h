// SPDX-License-Identifier: Apache-2.0
// The requests a scenario's flows issue, drawn once from its seed: open-loop
// Poisson arrivals per host (times the bursts' factors), reads and writes
// by the flow's mix, addresses uniform or Zipfian over the flow's file. An
// address's 1 MiB stripe picks its server and device by hash (placement),
// its page on the device by hash too.
//
//   std::vector<sim::Request> requests = sim::DrawRequests(layout);
//
// Thread-safe (no state).
#ifndef SROUTE_SIM_WORKLOAD_H_
#define SROUTE_SIM_WORKLOAD_H_

#include <cstdint>
#include <vector>

#include "sim/scenario.h"

namespace sroute::sim {

// The devices' page: requests are whole pages.
inline constexpr uint64_t kSimPageBytes = 4096;

struct Request {
  uint64_t arrival_ns;  // A(r): when the host issues it
  uint64_t page;        // its first 4 KiB page on the device
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
// arrival (ties by flow, then host).
std::vector<Request> DrawRequests(const Layout& layout);

}  // namespace sroute::sim

#endif  // SROUTE_SIM_WORKLOAD_H_

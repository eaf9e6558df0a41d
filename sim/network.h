// SPDX-License-Identifier: Apache-2.0
// The network side of a simulation on SimGrid (flow level: each transfer a
// flow sharing its links max-min fairly, with SimGrid's TCP model, LV08):
// a rack (every machine on its own link to one switch) or SNIS's Clos
// (machines dealt round the ToRs, ToRs on their pod's leaves, pods on the
// spines, as zones within zones; the links from a ToR to its leaves count
// as one of leaves x up_gbps, and a pod's to the spines likewise). A read's
// data goes from the server to the host, a write's from the host to the
// server.
//
//   auto net = sim::NetworkSim::Create(layout);
//   std::vector<uint64_t> done = (*net)->Run(requests, start_ns);
//
// SimGrid keeps one engine per process: one NetworkSim per process
// (sim::Simulate runs each scenario in a child process). Not thread-safe.
#ifndef SROUTE_SIM_NETWORK_H_
#define SROUTE_SIM_NETWORK_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/scenario.h"
#include "sim/workload.h"

namespace sroute::sim {

class NetworkSim {
 public:
  // FailedPrecondition if this process made one already.
  static absl::StatusOr<std::unique_ptr<NetworkSim>> Create(
      const Layout& layout);
  ~NetworkSim();

  // Each request's transfer starts at `start_ns[i]`; returns when each
  // ends. Runs are independent (each begins on idle links). Requests
  // `skip` marks (if not null) send nothing: they end when they start.
  std::vector<uint64_t> Run(const std::vector<Request>& requests,
                            const std::vector<uint64_t>& start_ns,
                            const std::vector<uint8_t>* skip = nullptr);

  // How long a transfer of `bytes` between `host` and `server` (a read's
  // from the server, a write's to it) takes on idle links: probed once per
  // kind of route (the same ToR, the same pod, across pods) and size.
  uint64_t IdleNs(uint32_t host, uint32_t server, uint32_t bytes, bool read);

  struct Impl;

 private:
  explicit NetworkSim(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sroute::sim

#endif  // SROUTE_SIM_NETWORK_H_

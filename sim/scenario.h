// SPDX-License-Identifier: Apache-2.0
// Scenarios of sroute-sim (proto/sim.proto) read from protobuf text and
// checked: a bad file gets InvalidArgument naming where and what, e.g.
//   rack.textproto:7:3: Message type "sroute.proto.SimFlow" has no field
//     named "rate".
//   flows[1].servers: no server or server group named "S9"
//
//   absl::StatusOr<sim::Layout> layout = sim::LoadScenario(path);
//
// Thread-safe (no state).
#ifndef SROUTE_SIM_SCENARIO_H_
#define SROUTE_SIM_SCENARIO_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/sim.pb.h"
#include "sim/routing.h"

namespace sroute::sim {

// The scenario with its groups expanded: every machine by name.
struct Layout {
  proto::SimScenario scenario;
  struct Server {
    std::string name;
    uint32_t devices;
    std::string preset;
    double warm_fill;  // 0: every page, written once (no history of its own)
    double warm_overwrites;
    // Each device warmed with a history of its own.
    bool own_history() const { return warm_fill > 0 || warm_overwrites > 0; }
  };
  std::vector<Server> servers;
  std::vector<std::string> hosts;
  // Per host, its group's cost per IO, bound on IOs under way (0: none)
  // and remote timeout.
  std::vector<uint64_t> host_io_cost_ns;
  std::vector<uint32_t> host_max_in_flight;
  std::vector<uint64_t> host_remote_timeout_ns;
  // Per flow, the indices of its hosts and of its servers.
  std::vector<std::vector<uint32_t>> flow_hosts, flow_servers;
  // The scenario's rules (cids 1, 2, ...), every host's at the start, and
  // the table they make, for flows that name a file.
  std::vector<SimRule> rules;
  std::shared_ptr<const Router> router;
  // GC spells, in order of their start.
  struct GcSpell {
    uint64_t from_ns, until_ns;
    uint32_t server, device;
  };
  std::vector<GcSpell> gc;
  // Spells of servers down, in order of their start.
  struct DownSpell {
    uint64_t from_ns, until_ns;  // until UINT64_MAX: never back
    uint32_t server;
    bool hang;  // it stops answering (IOs fail at their remote timeout)
  };
  std::vector<DownSpell> down;
  // The trace flows' IOs, in the order of their files' lines.
  struct TraceIo {
    uint64_t at_ns;
    uint64_t offset;
    std::string source, file;  // file empty: the flow's servers by hash
    uint32_t flow, host, bytes;
    bool read;
  };
  std::vector<TraceIo> trace;
  // The replica sets, their members by server index.
  struct ReplicaSet {
    std::string name;
    std::vector<uint32_t> members;
    enum class Read : uint8_t { kPrimary, kRandom, kLeastLoaded } read;
    uint32_t ack;      // members a write needs; 0: all of those up
    bool gc_redirect;  // also with gc_grants
    // GC the set grants (gc "delay", "background"), asking every gc_poll_ns.
    enum class Grants : uint8_t { kNone, kDelay, kBackground } gc_grants;
    uint64_t gc_poll_ns;
  };
  std::vector<ReplicaSet> replica_sets;
};

// Parses `text` (`origin` names it in errors) and checks it.
absl::StatusOr<Layout> ParseScenario(std::string_view text,
                                     std::string_view origin);
// The same from a file.
absl::StatusOr<Layout> LoadScenario(const std::string& path);

}  // namespace sroute::sim

#endif  // SROUTE_SIM_SCENARIO_H_

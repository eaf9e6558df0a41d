// SPDX-License-Identifier: Apache-2.0
// Where a simulated host sends an IO: its rules (the project's rule
// language and RuleTable, the table every host's sSwitch holds) route the
// header <flow, op, file, offset, length> to files on servers
// ("//SERVER/PATH") or to the scenario's replica sets (stage:NAME, whose
// member a pass picks: sim/workload.h); a byte-ranged rule splits an IO in
// pieces, a write scattered to several targets goes to each, a read to the
// first.
// `track_writes` rules (tail_latency's off-loads) are routed as the
// delegate routes them: each place says whether its write goes away (and
// reads of its bytes must follow it) or home (the bytes come back); with
// `spread`, each 1 MiB chunk of a file to one of the targets.
//
//   auto router = sim::Router::Create(rules, server_names);
//   std::vector<sim::Place> places;
//   absl::Status s = (*router)->Route(header, &places);
//
// Immutable once made: thread-safe.
#ifndef SROUTE_SIM_ROUTING_H_
#define SROUTE_SIM_ROUTING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "rules/io_header.h"
#include "rules/rule_table.h"

namespace sroute::sim {

// A rule of a simulated host: the scenario's, or one an app inserted.
struct SimRule {
  uint64_t cid;        // the simulated controller's id
  std::string text;    // as written
  std::string owner;   // "scenario" or the app
  std::string origin;  // where it came from, for errors: "rules[2]"
};

// What a write's place does to the bytes it writes (track_writes).
enum class Track : uint8_t {
  kNone,
  kAway,  // written away: reads of these bytes follow them here
  kHome,  // written home: those bytes are home again
};

// A piece of an IO on a server: the file there and its byte range, and
// the rule that sent it there (its cid; 0: no rule matched).
struct Place {
  static constexpr uint32_t kNoStage = UINT32_MAX;
  uint32_t server;  // (none when `stage` is a replica set)
  std::string file;
  uint64_t offset, length;
  uint64_t rule = 0;
  Track track = Track::kNone;
  // A replica set of the scenario (its index) the piece goes through: its
  // members hold `file` (the IO's own) as //MEMBER/PATH.
  uint32_t stage = kNoStage;
};

class Router {
 public:
  // InvalidArgument "ORIGIN: COLUMN: reason" for a rule that does not
  // parse, or whose delegate the simulation does not model (every one but
  // track_writes). `stages` are the replica sets' names.
  static absl::StatusOr<std::unique_ptr<Router>> Create(
      const std::vector<SimRule>& rules,
      const std::vector<std::string>& servers,
      const std::vector<std::string>& stages = {});

  // The places `h` goes to, in offset order. InvalidArgument when a piece
  // goes to an endpoint that is no server, to a stage that is no replica
  // set of the scenario, or to the controller (naming the file and the
  // rule).
  absl::Status Route(const IoHeader& h, std::vector<Place>* out) const;

 private:
  Router(std::shared_ptr<const RuleTable> table,
         absl::flat_hash_map<std::string, uint32_t> servers,
         absl::flat_hash_map<std::string, uint32_t> stages)
      : table_(std::move(table)),
        servers_(std::move(servers)),
        stages_(std::move(stages)) {}
  std::shared_ptr<const RuleTable> table_;
  absl::flat_hash_map<std::string, uint32_t> servers_, stages_;
};

}  // namespace sroute::sim

#endif  // SROUTE_SIM_ROUTING_H_

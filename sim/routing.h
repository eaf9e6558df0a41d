// SPDX-License-Identifier: Apache-2.0
// Where a simulated host sends an IO: the scenario's rules (the project's
// rule language and RuleTable, the table every host's sSwitch holds) route
// the header <flow, op, file, offset, length> to files on servers
// ("//SERVER/PATH"); a byte-ranged rule splits an IO in pieces, a write
// scattered to several targets goes to each, a read to the first.
//
//   auto router = sim::Router::Create(rule_texts, server_names);
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

// A piece of an IO on a server: the file there and its byte range.
struct Place {
  uint32_t server;
  std::string file;
  uint64_t offset, length;
};

class Router {
 public:
  // InvalidArgument "rules[I]: COLUMN: reason" for a rule that does not
  // parse.
  static absl::StatusOr<std::unique_ptr<Router>> Create(
      const std::vector<std::string>& rules,
      const std::vector<std::string>& servers);

  // The places `h` goes to, in offset order. InvalidArgument when a piece
  // goes to an endpoint that is no server (naming the file and the rule).
  absl::Status Route(const IoHeader& h, std::vector<Place>* out) const;

 private:
  Router(std::shared_ptr<const RuleTable> table,
         absl::flat_hash_map<std::string, uint32_t> servers)
      : table_(std::move(table)), servers_(std::move(servers)) {}
  std::shared_ptr<const RuleTable> table_;
  absl::flat_hash_map<std::string, uint32_t> servers_;
};

}  // namespace sroute::sim

#endif  // SROUTE_SIM_ROUTING_H_

// SPDX-License-Identifier: Apache-2.0
// The rule checker (docs/design.md §4, §8): finds what is wrong with rule
// tables before they are installed, each finding with a concrete IO header that
// shows it (a witness), which the sSwitch's own matcher routes as the
// finding says.
//
// What it finds, over one sSwitch's table or a cluster's tables with their
// topology (which endpoints and stages each sSwitch has, which server an
// endpoint is):
//   errors
//     black-hole      a target on an endpoint or stage its sSwitch does not
//                     have, a remote stage on a server that lacks it, or a
//                     `*` target whose substitution yields no file name
//     loop            IOs that come back to where they were: sSwitches
//                     forwarding a file to each other, a stage's hand-back
//                     routed to the same stage again
//   warnings
//     shadowed        no header reaches the rule: rules before it (priority,
//                     then order) take everything it matches, with sources,
//                     op classes, exact/prefix/regex files and byte ranges
//     partly-shadowed byte ranges of a ranged rule that no header reaches
//     never-matches   a ranged rule for ops without a byte extent (c, d)
//     rw-hazard       reads of a byte range go where writes of it (from the
//                     same or another source) do not, and no write-tracking
//                     delegate makes reads follow the writes
//     scatter-hazard  writes of a byte range that a scatter rule replicates
//                     are taken by a ranged rule to fewer places
//     track-writes-shadowed
//                     the read rules a track_writes rule makes (just ahead
//                     of it) lose reads to a rule before it
//     not-analysed    a regex the checker cannot model (its findings are
//                     then not claimed)
//
// Exactness: shadowing is decided exactly over every header (sources named
// in the tables plus any other tenant, every op class, any file name, every
// byte): "shadowed" is never said of a rule some header reaches, and every
// shadowed rule is found, unless a regex is outside what check/file_set.h
// models (then not-analysed). Loops and hazards are found by following
// witness headers (one per reachable rule and per byte range of its file)
// through the tables: every finding is real; a loop reached only by
// headers no rule's witness takes can be missed.
//
// Incremental use: Checker keeps each sSwitch's table indexed; CheckChange
// reports what inserting and removing rules on one sSwitch would introduce,
// at a cost that grows with the rules the change overlaps, not with the
// table.
//
// Thread safety: a Checker is not thread-safe (it caches compiled patterns);
// use one per thread or lock around it.
#ifndef SROUTE_CHECK_CHECKER_H_
#define SROUTE_CHECK_CHECKER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "rules/io_header.h"
#include "rules/parser.h"
#include "rules/rule.h"
#include "rules/rule_table.h"

namespace sroute::check {

// One rule of a table as the checker reads it.
struct TableRule {
  Rule rule;
  OrderKey order;      // its precedence (the table's order)
  uint64_t id = 0;     // its id at its host, or cid at the controller
  std::string origin;  // where it came from: "FILE:LINE", "cid 12", ...
};

// One sSwitch.
struct SwitchView {
  std::string name;     // the sSwitch's name
  std::string address;  // a storage server's RPC address; "" for FUSE hosts
  // Whether endpoints and stages below are known; if not, targets are not
  // checked against them (an offline check of a rules file).
  bool topology_known = false;
  struct Endpoint {
    std::string name;
    std::string kind;     // "dir", "server" or "flash"
    std::string address;  // a server's HOST:PORT
  };
  std::vector<Endpoint> endpoints;
  std::vector<std::string> stages;
  std::vector<TableRule> rules;  // in any order: `order` decides
};

enum class FindingKind {
  kBlackHole,
  kLoop,
  kShadowed,
  kPartlyShadowed,
  kNeverMatches,
  kReadWriteHazard,
  kScatterHazard,
  kTrackWritesShadowed,
  kNotAnalysed,
};
// "black-hole", "loop", "shadowed", ...
std::string_view KindName(FindingKind kind);
// Black holes and loops: an update that introduces one is refused.
bool IsError(FindingKind kind);

struct Finding {
  FindingKind kind = FindingKind::kShadowed;
  std::string sswitch;
  std::string rule;    // the rule's text
  std::string origin;  // TableRule::origin
  uint64_t rule_id = 0;
  std::string detail;  // what is wrong, in words
  // A header (at `sswitch`) that shows it: routed there it takes the route
  // `detail` describes.
  std::optional<IoHeader> witness;
  // Loops: the hops the witness takes, "SSWITCH: HEADER -> TARGET".
  std::vector<std::string> path;
  bool error() const { return IsError(kind); }
};

struct Report {
  std::vector<Finding> findings;
  size_t errors() const;
  size_t warnings() const;
  // A finding a paragraph: "ORIGIN: error|warning: KIND: RULE", the detail,
  // the witness and the path indented; then (if `summary`) a line
  // "N errors, M warnings".
  std::string Text(bool summary = true) const;
};

struct CheckOptions {
  // Also re-route every witness through a table built from the rules and
  // drop (and count in Report as not-analysed) any that does not route as
  // its finding says: a self-check of the checker, slower.
  bool deep = false;
};

class Checker {
 public:
  explicit Checker(std::vector<SwitchView> switches);
  ~Checker();
  Checker(const Checker&) = delete;
  Checker& operator=(const Checker&) = delete;

  // Every finding over every table.
  Report CheckAll(const CheckOptions& options = {});

  // What changing sSwitch `sswitch` (inserting `add`, removing the rules
  // whose ids are in `remove`) would introduce: the findings about the
  // inserted rules, about rules they shadow or that removed rules
  // uncovered, and loops and hazards through either. The checker's tables
  // stay as they are. An unknown sSwitch is checked as a new, empty one.
  Report CheckChange(const std::string& sswitch,
                     const std::vector<TableRule>& add,
                     const std::vector<uint64_t>& remove,
                     const CheckOptions& options = {});

  // The same for changes of several sSwitches at once (one update).
  struct Change {
    std::string sswitch;
    std::vector<TableRule> add;
    std::vector<uint64_t> remove;
  };
  Report CheckChanges(const std::vector<Change>& changes,
                      const CheckOptions& options = {});

  // Makes the change part of the checker's tables.
  void Apply(const std::string& sswitch, const std::vector<TableRule>& add,
             const std::vector<uint64_t>& remove);

  // The sSwitch's table as the sSwitch would hold it (for routing
  // witnesses in tests): rule ids are TableRule::id.
  RuleTablePtr TableOf(const std::string& sswitch) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The rules of a parsed rules file as a table: in file order, ids 1, 2, ...
// by position, each named ORIGIN:LINE.
std::vector<TableRule> TableRulesOf(const ParsedRules& parsed,
                                    std::string_view origin);
// Rules to check as if inserted now, after every installed rule of their
// priority, named "new rule N" (" on WHERE" if given). Fails on a bad
// rule, naming it.
absl::StatusOr<std::vector<TableRule>> NewRules(
    const std::vector<std::string>& texts, std::string_view where = "");
// The same of rules already parsed.
std::vector<TableRule> NewRules(const std::vector<Rule>& rules,
                                std::string_view where = "");

// A witness header as reports show it: "<SOURCE, OP, FILE[, OFFSET,
// LENGTH]>" ("stage:NAME (TENANT)" for hand-backs; control characters in
// names escaped).
std::string FormatWitness(const IoHeader& h);

// One-shot: Checker(switches).CheckAll(options).
Report CheckTables(std::vector<SwitchView> switches,
                   const CheckOptions& options = {});

}  // namespace sroute::check

#endif  // SROUTE_CHECK_CHECKER_H_

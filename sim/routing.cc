// SPDX-License-Identifier: Apache-2.0
#include "sim/routing.h"

#include "rules/parser.h"
#include "util/strings.h"

namespace sroute::sim {

absl::StatusOr<std::unique_ptr<Router>> Router::Create(
    const std::vector<std::string>& rules,
    const std::vector<std::string>& servers) {
  std::vector<RuleEntryPtr> entries;
  for (size_t i = 0; i < rules.size(); ++i) {
    auto rule = ParseRule(rules[i]);
    if (!rule.ok()) {
      return absl::InvalidArgumentError(
          StrCat("rules[", i, "]: ", rule.status().message()));
    }
    OrderKey order;
    order.priority = rule->priority;
    order.seq = i + 1;
    entries.push_back(
        std::make_shared<RuleEntry>(i + 1, order, *std::move(rule), "sim"));
  }
  absl::flat_hash_map<std::string, uint32_t> by_name;
  for (uint32_t s = 0; s < servers.size(); ++s) by_name[servers[s]] = s;
  return std::unique_ptr<Router>(
      new Router(RuleTable::Build(std::move(entries)), std::move(by_name)));
}

absl::Status Router::Route(const IoHeader& h, std::vector<Place>* out) const {
  out->clear();
  RuleTable::Pieces pieces;
  table_->Route(h, &pieces);
  for (const RuleTable::Piece& piece : pieces) {
    std::vector<std::string> files;
    if (piece.rule == nullptr) {
      files.push_back(h.file);  // the default route: the file's own endpoint
    } else {
      const Rule& rule = piece.rule->rule();
      for (const Detour& d : rule.detours) {
        if (d.what != Detour::What::kIo) continue;
        if (d.target.kind != Target::Kind::kFile) {
          return absl::InvalidArgumentError(
              StrCat(h.file, ": the rule \"", FormatRule(rule),
                     "\" sends it to a stage or the controller, which the "
                     "simulation does not model yet"));
        }
        files.push_back(ResolveTargetFile(d.target, rule.pattern.file, h.file));
        // A read goes to its first place; a write to all of them.
        if (h.op_class() == kOpClassRead) break;
      }
    }
    for (const std::string& file : files) {
      // "//SERVER/PATH": the endpoint is the server.
      const size_t end = file.find('/', 2);
      const std::string endpoint = file.substr(
          2, end == std::string::npos ? std::string::npos : end - 2);
      auto s = servers_.find(endpoint);
      if (s == servers_.end()) {
        return absl::InvalidArgumentError(StrCat(
            h.file, " goes to ", file, ": \"", endpoint,
            "\" is no server of the scenario",
            piece.rule == nullptr
                ? " (no rule matches it)"
                : StrCat(" (by \"", FormatRule(piece.rule->rule()), "\")")));
      }
      out->push_back(Place{s->second, file, piece.offset, piece.length});
    }
  }
  return absl::OkStatus();
}

}  // namespace sroute::sim

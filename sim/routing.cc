// SPDX-License-Identifier: Apache-2.0
#include "sim/routing.h"

#include "rules/parser.h"
#include "util/strings.h"

namespace sroute::sim {
namespace {

// track_writes's one argument ("", "home" or "spread").
std::string_view TrackWritesArg(const DelegateSpec& d) {
  return d.args.size() == 1 && d.args[0].key.empty()
             ? std::string_view(d.args[0].value)
             : std::string_view();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Router>> Router::Create(
    const std::vector<SimRule>& rules, const std::vector<std::string>& servers,
    const std::vector<std::string>& stages) {
  std::vector<RuleEntryPtr> entries;
  for (size_t i = 0; i < rules.size(); ++i) {
    auto rule = ParseRule(rules[i].text);
    if (!rule.ok()) {
      return absl::InvalidArgumentError(
          StrCat(rules[i].origin, ": ", rule.status().message()));
    }
    if (rule->delegate && (rule->delegate->name != "track_writes" ||
                           rule->delegate->args.size() > 1 ||
                           (rule->delegate->args.size() == 1 &&
                            TrackWritesArg(*rule->delegate).empty()))) {
      return absl::InvalidArgumentError(
          StrCat(rules[i].origin, ": the delegate of \"", rules[i].text,
                 "\" is not simulated (track_writes, track_writes(home) and "
                 "track_writes(spread) are)"));
    }
    OrderKey order;
    order.priority = rule->priority;
    order.seq = i + 1;
    entries.push_back(std::make_shared<RuleEntry>(
        rules[i].cid, order, *std::move(rule), rules[i].owner));
  }
  absl::flat_hash_map<std::string, uint32_t> by_name, stage_by_name;
  for (uint32_t s = 0; s < servers.size(); ++s) by_name[servers[s]] = s;
  for (uint32_t s = 0; s < stages.size(); ++s) stage_by_name[stages[s]] = s;
  return std::unique_ptr<Router>(
      new Router(RuleTable::Build(std::move(entries)), std::move(by_name),
                 std::move(stage_by_name)));
}

absl::Status Router::Route(const IoHeader& h, std::vector<Place>* out) const {
  out->clear();
  RuleTable::Pieces pieces;
  table_->Route(h, &pieces);
  const bool read = h.op_class() == kOpClassRead;
  for (const RuleTable::Piece& piece : pieces) {
    std::vector<std::string> files;
    std::vector<uint32_t> through;  // per file: its replica set, if any
    Track track = Track::kNone;
    if (piece.rule == nullptr) {
      files.push_back(h.file);  // the default route: the file's own endpoint
    } else {
      const Rule& rule = piece.rule->rule();
      for (const Detour& d : rule.detours) {
        if (d.what != Detour::What::kIo) continue;
        if (d.target.kind == Target::Kind::kStage) {
          auto set = stages_.find(d.target.stage);
          if (set == stages_.end() || !d.target.stage_host.empty()) {
            return absl::InvalidArgumentError(StrCat(
                h.file, ": the rule \"", FormatRule(rule),
                "\" sends it to stage ", d.target.stage,
                ", which is no replica set of the scenario (the simulation "
                "models a host's replica sets, not other stages)"));
          }
          files.push_back(h.file);
          through.resize(files.size(), Place::kNoStage);
          through.back() = set->second;
          if (read) break;
          continue;
        }
        if (d.target.kind != Target::Kind::kFile) {
          return absl::InvalidArgumentError(
              StrCat(h.file, ": the rule \"", FormatRule(rule),
                     "\" sends it to the controller, which the simulation "
                     "does not model"));
        }
        files.push_back(ResolveTargetFile(d.target, rule.pattern.file, h.file));
        // A read goes to its first place; a write to all of them.
        if (read) break;
      }
      if (rule.delegate && !read) {
        const std::string_view arg = TrackWritesArg(*rule.delegate);
        track = arg == "home" ? Track::kHome : Track::kAway;
        if (arg == "spread" && files.size() > 1) {
          // track_writes(spread): the target its 1 MiB chunk hashes to, as
          // the delegate picks it.
          const size_t slot =
              (std::hash<std::string_view>()(h.file) + (piece.offset >> 20)) %
              files.size();
          files = {files[slot]};
          through = slot < through.size() ? std::vector<uint32_t>{through[slot]}
                                          : std::vector<uint32_t>();
        }
      }
    }
    through.resize(files.size(), Place::kNoStage);
    for (size_t f = 0; f < files.size(); ++f) {
      const std::string& file = files[f];
      if (through[f] != Place::kNoStage) {
        out->push_back(Place{UINT32_MAX, file, piece.offset, piece.length,
                             piece.rule == nullptr ? 0 : piece.rule->id(),
                             track, through[f]});
        continue;
      }
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
      out->push_back(Place{s->second, file, piece.offset, piece.length,
                           piece.rule == nullptr ? 0 : piece.rule->id(),
                           track});
    }
  }
  return absl::OkStatus();
}

}  // namespace sroute::sim

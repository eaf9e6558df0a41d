// SPDX-License-Identifier: Apache-2.0
// The rule checker's public API (check/checker.h); its engine is in
// check/engine.h.
#include "check/checker.h"

#include <algorithm>
#include <map>
#include <set>

#include "check/engine.h"
#include "rules/parser.h"
#include "util/strings.h"

namespace sroute::check {

using internal::Engine;
using internal::EntryOf;
using internal::FormatHeader;
using internal::RuleRec;
using internal::SourceMeets;
using internal::Switch;
using internal::View;
using internal::Winner;

std::string FormatWitness(const IoHeader& h) { return FormatHeader(h); }

std::vector<TableRule> TableRulesOf(const ParsedRules& parsed,
                                    std::string_view origin) {
  std::vector<TableRule> out;
  for (size_t i = 0; i < parsed.rules.size(); ++i) {
    TableRule t;
    t.rule = parsed.rules[i];
    t.order.priority = t.rule.priority;
    t.order.seq = i + 1;
    t.id = i + 1;
    t.origin = StrCat(origin, ":", parsed.lines[i]);
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<TableRule>> NewRules(
    const std::vector<std::string>& texts, std::string_view where) {
  std::vector<Rule> rules;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<Rule> r = ParseRule(texts[i]);
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          StrCat("rule ", i + 1, ": ", r.status().message()));
    }
    rules.push_back(*std::move(r));
  }
  return NewRules(rules, where);
}

std::vector<TableRule> NewRules(const std::vector<Rule>& rules,
                                std::string_view where) {
  std::vector<TableRule> out;
  for (size_t i = 0; i < rules.size(); ++i) {
    TableRule t;
    t.order.priority = rules[i].priority;
    t.order.seq = (uint64_t{1} << 62) + i;  // after every installed rule
    t.rule = rules[i];
    t.origin = where.empty() ? StrCat("new rule ", i + 1)
                             : StrCat("new rule ", i + 1, " on ", where);
    out.push_back(std::move(t));
  }
  return out;
}

std::string_view KindName(FindingKind kind) {
  switch (kind) {
    case FindingKind::kBlackHole:
      return "black-hole";
    case FindingKind::kLoop:
      return "loop";
    case FindingKind::kShadowed:
      return "shadowed";
    case FindingKind::kPartlyShadowed:
      return "partly-shadowed";
    case FindingKind::kNeverMatches:
      return "never-matches";
    case FindingKind::kReadWriteHazard:
      return "rw-hazard";
    case FindingKind::kScatterHazard:
      return "scatter-hazard";
    case FindingKind::kTrackWritesShadowed:
      return "track-writes-shadowed";
    case FindingKind::kNotAnalysed:
      return "not-analysed";
  }
  return "?";
}

bool IsError(FindingKind kind) {
  return kind == FindingKind::kBlackHole || kind == FindingKind::kLoop;
}

size_t Report::errors() const {
  return std::count_if(findings.begin(), findings.end(),
                       [](const Finding& f) { return f.error(); });
}
size_t Report::warnings() const { return findings.size() - errors(); }

std::string Report::Text(bool summary) const {
  std::string out;
  for (const Finding& f : findings) {
    out += StrCat(f.origin.empty() ? f.sswitch : f.origin, ": ",
                  f.error() ? "error" : "warning", ": ", KindName(f.kind), ": ",
                  f.rule, "\n    ", f.detail, "\n");
    if (f.witness) {
      out += StrCat("    witness at ", f.sswitch, ": ",
                    FormatHeader(*f.witness), "\n");
    }
    for (const std::string& hop : f.path) out += "      " + hop + "\n";
  }
  if (!summary) return out;
  out += StrCat(errors(), " error", errors() == 1 ? "" : "s", ", ", warnings(),
                " warning", warnings() == 1 ? "" : "s", "\n");
  return out;
}

struct Checker::Impl {
  explicit Impl(std::vector<SwitchView> views) : engine(std::move(views)) {}
  Engine engine;
};

Checker::Checker(std::vector<SwitchView> switches)
    : impl_(std::make_unique<Impl>(std::move(switches))) {}
Checker::~Checker() = default;

namespace {

// Drops findings whose witness the table does not route as they say.
void Verify(std::map<std::string, View>& views, Report* report) {
  std::vector<Finding> kept;
  for (Finding& f : report->findings) {
    bool ok = true;
    if (f.witness &&
        (f.kind == FindingKind::kBlackHole || f.kind == FindingKind::kLoop)) {
      IoHeader h = *f.witness;
      const RuleEntry* w = Winner(*views.at(f.sswitch).table, &h);
      ok = w != nullptr && w->owner() == f.origin;
    }
    if (f.witness && f.kind == FindingKind::kShadowed) {
      IoHeader h = *f.witness;
      const RuleEntry* w = Winner(*views.at(f.sswitch).table, &h);
      ok = w == nullptr || w->owner() != f.origin;
    }
    if (ok) {
      kept.push_back(std::move(f));
    } else {
      Finding n = std::move(f);
      n.detail = "the witness does not route as the checker said: " + n.detail;
      n.kind = FindingKind::kNotAnalysed;
      kept.push_back(std::move(n));
    }
  }
  report->findings = std::move(kept);
}

}  // namespace

Report Checker::CheckAll(const CheckOptions& options) {
  Engine& e = impl_->engine;
  std::map<std::string, View> views;
  e.Views(&views);
  std::vector<std::pair<std::string, RuleRec*>> subjects;
  for (auto& [name, sw] : e.switches_) {
    std::vector<RuleRec*> rules;
    for (auto& [key, r] : sw->rules) rules.push_back(r.get());
    std::sort(rules.begin(), rules.end(),
              [](RuleRec* a, RuleRec* b) { return a->Before(*b); });
    for (RuleRec* r : rules) subjects.push_back({name, r});
  }
  Report report;
  e.Findings(views, subjects, &report);
  if (options.deep) Verify(views, &report);
  return report;
}

Report Checker::CheckChange(const std::string& sswitch,
                            const std::vector<TableRule>& add,
                            const std::vector<uint64_t>& remove,
                            const CheckOptions& options) {
  return CheckChanges({{sswitch, add, remove}}, options);
}

Report Checker::CheckChanges(const std::vector<Change>& changes,
                             const CheckOptions& options) {
  Engine& e = impl_->engine;
  // Each changed sSwitch as a view: new records (not indexed), removed
  // keys, and its table with the change applied.
  std::vector<std::unique_ptr<RuleRec>> added;
  std::map<std::string, View> after, before;
  e.Views(&before);
  std::vector<std::pair<std::string, RuleRec*>> subjects_after, subjects_before;
  for (const Change& c : changes) {
    Switch& sw = e.Get(c.sswitch);
    View& v = after[c.sswitch];
    v.sw = &sw;
    before[c.sswitch].sw = &sw;
    before[c.sswitch].table = sw.table;
    std::vector<RuleEntryPtr> entries;
    for (const TableRule& tr : c.add) {
      std::unique_ptr<RuleRec> r = e.NewRec(tr);
      entries.push_back(r->entry);
      v.added.push_back(r.get());
      added.push_back(std::move(r));
    }
    std::vector<RuleRec*> removed;
    std::vector<uint64_t> removed_keys;
    for (uint64_t id : c.remove) {
      auto it = sw.keys_of_id.find(id);
      if (it == sw.keys_of_id.end()) continue;
      for (uint64_t key : it->second) {
        removed.push_back(sw.rules.at(key).get());
        removed_keys.push_back(key);
        v.removed.insert(key);
      }
    }
    v.table = sw.table->Apply(std::move(entries), removed_keys, 0);

    // Subjects: the new rules, and the rules they or the removed ones meet
    // (whose findings may change).
    std::vector<RuleRec*> touched;
    auto touch = [&](RuleRec* changed) {
      before[c.sswitch].ForEachFileNeighbour(
          changed, /*with_names=*/true, [&](RuleRec* o) {
            if (!o->rule().is_tap() && changed->Before(*o) &&
                SourceMeets(o->rule().pattern.source,
                            changed->rule().pattern.source) &&
                (o->rule().pattern.ops & changed->rule().pattern.ops)) {
              touched.push_back(o);
            }
          });
    };
    for (RuleRec* r : v.added) touch(r);
    for (RuleRec* r : removed) touch(r);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (RuleRec* r : v.added) subjects_after.push_back({c.sswitch, r});
    for (RuleRec* r : touched) {
      if (v.removed.contains(r->key)) continue;
      subjects_after.push_back({c.sswitch, r});
      subjects_before.push_back({c.sswitch, r});
    }
  }
  for (auto& [name, v] : before) {
    if (!after.contains(name)) after[name] = v;
  }
  Report now, then;
  e.Findings(after, subjects_after, &now);
  if (options.deep) Verify(after, &now);
  e.Findings(before, subjects_before, &then);
  // What the change introduces: findings that were not there before.
  std::set<std::string> old;
  auto key = [](const Finding& f) {
    return StrCat(KindName(f.kind), "\x1f", f.sswitch, "\x1f", f.origin, "\x1f",
                  f.rule, "\x1f", f.kind == FindingKind::kLoop ? "" : f.detail);
  };
  for (const Finding& f : then.findings) old.insert(key(f));
  Report report;
  for (Finding& f : now.findings) {
    if (!old.contains(key(f))) report.findings.push_back(std::move(f));
  }
  return report;
}

void Checker::Apply(const std::string& sswitch,
                    const std::vector<TableRule>& add,
                    const std::vector<uint64_t>& remove) {
  Engine& e = impl_->engine;
  Switch& sw = e.Get(sswitch);
  std::vector<uint64_t> removed_keys;
  for (uint64_t id : remove) {
    auto it = sw.keys_of_id.find(id);
    if (it == sw.keys_of_id.end()) continue;
    for (uint64_t key : it->second) {
      sw.Unindex(sw.rules.at(key).get());
      sw.rules.erase(key);
      removed_keys.push_back(key);
    }
    sw.keys_of_id.erase(it);
  }
  std::vector<RuleEntryPtr> entries;
  for (const TableRule& tr : add) entries.push_back(EntryOf(*e.AddRec(sw, tr)));
  sw.table = sw.table->Apply(std::move(entries), removed_keys, 0);
}

RuleTablePtr Checker::TableOf(const std::string& sswitch) const {
  Switch* sw = impl_->engine.Find(sswitch);
  return sw == nullptr ? RuleTable::Empty() : sw->table;
}

Report CheckTables(std::vector<SwitchView> switches,
                   const CheckOptions& options) {
  return Checker(std::move(switches)).CheckAll(options);
}

}  // namespace sroute::check

// SPDX-License-Identifier: Apache-2.0
// The passes over a view put together: every finding of a check
// (check/engine.h).
#include "check/engine.h"

namespace sroute::check::internal {

void Engine::Findings(
    std::map<std::string, View>& views,
    const std::vector<std::pair<std::string, RuleRec*>>& subjects,
    Report* report) {
  std::set<std::string> hazard_files_done;
  std::set<std::string> reported;
  for (const auto& subject : subjects) {
    const std::string& name = subject.first;
    RuleRec* const r = subject.second;
    View& v = views.at(name);
    const Analysis a = Analyse(v, r);
    auto add = [&](FindingKind kind, std::string detail,
                   std::optional<IoHeader> witness) {
      Finding f;
      f.kind = kind;
      f.sswitch = name;
      f.rule = r->Text();
      f.origin = r->tr.origin;
      f.rule_id = r->tr.id;
      f.detail = std::move(detail);
      f.witness = std::move(witness);
      report->findings.push_back(std::move(f));
    };
    if (r->rule().is_tap()) continue;
    BlackHoles(views, v, r, a, report);
    if (a.never_matches) {
      add(FindingKind::kNeverMatches,
          "a byte range matches only reads and writes, and the rule takes "
          "neither",
          std::nullopt);
      continue;
    }
    if (!a.not_analysed.empty() && !a.reach) {
      add(FindingKind::kNotAnalysed, a.not_analysed, std::nullopt);
      continue;
    }
    if (a.shadowed) {
      std::string by;
      if (a.sample) {
        IoHeader h = *a.sample;
        if (const RuleEntry* w = Winner(*v.table, &h)) {
          by = StrCat(": ", FormatHeader(h), " goes to ", w->owner(), " (",
                      FormatRule(w->rule()), ")");
        }
      }
      add(FindingKind::kShadowed,
          "rules before it take every header it matches" + by, a.sample);
      continue;
    }
    if (!a.covered.empty() && a.reach) {
      std::string ranges;
      for (const auto& [s, e] : a.covered) {
        ranges += (ranges.empty() ? "" : ", ") + FormatRange(s, e);
      }
      IoHeader h = *a.reach;
      h.offset = a.covered.front().first;
      h.length = std::min(a.covered.front().second - h.offset, kWitnessLength);
      std::string by;
      IoHeader routed = h;
      if (const RuleEntry* w = Winner(*v.table, &routed)) {
        by = StrCat(" (", FormatHeader(routed), " goes to ", w->owner(), ")");
      }
      add(FindingKind::kPartlyShadowed,
          StrCat("rules before it take every header of bytes ", ranges, by), h);
    }
    // Loops: where its witness goes (only IOs that reach a stage or
    // another sSwitch can come back).
    if (a.reach && MayLeave(v, r->rule())) {
      Trace trace;
      std::vector<std::string> path;
      std::set<std::string> on_path;
      int steps = 0;
      Follow(views, v, *a.reach, &path, &on_path, &trace, &steps);
      if (!trace.loop.empty()) {
        // Again, writing out the hops.
        trace = Trace();
        trace.record = true;
        path.clear();
        on_path.clear();
        steps = 0;
        Follow(views, v, *a.reach, &path, &on_path, &trace, &steps);
      }
      if (!trace.loop.empty()) {
        const std::string key = StrCat("loop\x1f", trace.cycle);
        if (reported.insert(key).second) {
          Finding f;
          f.kind = FindingKind::kLoop;
          f.sswitch = name;
          f.rule = r->Text();
          f.origin = r->tr.origin;
          f.rule_id = r->tr.id;
          f.detail = "IOs it routes come back to where they were";
          f.witness = a.reach;
          f.path = std::move(trace.loop);
          report->findings.push_back(std::move(f));
        }
      }
    }
    // track_writes: the read rules it makes go just ahead of it, so a
    // rule before it that takes such reads keeps them from the writes.
    if (HasTrackWrites(r->rule())) {
      RuleRec probe;
      probe.tr.order = r->tr.order;
      Rule reads = r->rule();
      reads.pattern.ops = kOpClassRead;
      reads.delegate.reset();
      if (!reads.pattern.file.range) {
        reads.pattern.file.range = ByteRange{0, kEnd};
      }
      probe.entry =
          std::make_shared<RuleEntry>(0, r->tr.order, std::move(reads), "");
      std::vector<RuleRec*> before;
      v.ForEachFileNeighbour(&probe, /*with_names=*/true, [&](RuleRec* o) {
        if (o != r && o->Before(*r) && !o->rule().is_tap() &&
            (o->rule().pattern.ops & kOpClassRead) &&
            SourceMeets(o->rule().pattern.source,
                        probe.rule().pattern.source)) {
          before.push_back(o);
        }
      });
      std::sort(before.begin(), before.end(),
                [](RuleRec* x, RuleRec* y) { return x->Before(*y); });
      for (RuleRec* o : before) {
        std::optional<IoHeader> h = Meeting(&probe, o);
        if (!h) continue;
        const RuleEntry* w = Winner(*v.table, &*h);
        if (w == nullptr || !(w->order() < r->tr.order)) continue;
        add(FindingKind::kTrackWritesShadowed,
            StrCat("reads that should follow its writes go to ", w->owner(),
                   " (", FormatRule(w->rule()), "), a rule before it"),
            h);
        break;
      }
    }
    if (a.reach &&
        hazard_files_done.insert(name + "\x1f" + a.reach->file).second) {
      Hazards(v, a.reach->file, views, report, &reported);
    }
  }
}

}  // namespace sroute::check::internal

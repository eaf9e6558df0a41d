// SPDX-License-Identifier: Apache-2.0
// Where IOs go from a view: the servers they reach, loops, black holes,
// hazards of IOs that leave the host (check/engine.h).
#include "check/engine.h"

namespace sroute::check::internal {

const View* Engine::ServerAt(std::map<std::string, View>& views, const View& at,
                             const std::string& endpoint) {
  for (const auto& e : at.sw->view.endpoints) {
    if (e.name != endpoint || e.kind != "server") continue;
    for (auto& [name, v] : views) {
      if (!v.sw->view.address.empty() && v.sw->view.address == e.address) {
        return &v;
      }
    }
  }
  return nullptr;
}

void Engine::Deliver(std::map<std::string, View>& views, const View& at,
                     const std::string& file, const IoHeader& h,
                     std::vector<std::string>* path,
                     std::set<std::string>* on_path, Trace* out, int* steps) {
  FileName name;
  if (!SplitFileName(file, &name)) {
    out->ends.insert(StrCat(at.sw->view.name, "\x1f", Printable(file)));
    return;
  }
  if (const View* next = ServerAt(views, at, std::string(name.host))) {
    IoHeader h2 = h;
    h2.file = JoinFileName(next->sw->view.name, name.path);
    Follow(views, *next, std::move(h2), path, on_path, out, steps);
    return;
  }
  out->ends.insert(StrCat(at.sw->view.name, "\x1f", Printable(file)));
}

void Engine::Follow(std::map<std::string, View>& views, const View& at,
                    IoHeader h, std::vector<std::string>* path,
                    std::set<std::string>* on_path, Trace* out, int* steps) {
  if (!out->loop.empty() || ++*steps > 256) return;
  const std::string key =
      StrCat(at.sw->view.name, "\x1f", h.stage, "\x1f", h.file);
  const RuleEntry* rule = Winner(*at.table, &h);
  // Hops are written out only when a loop's path is wanted.
  const std::string hop =
      out->record ? StrCat(at.sw->view.name, ": ", FormatHeader(h)) : "";
  if (on_path->contains(key) || static_cast<int>(path->size()) >= kMaxHops) {
    out->loop = *path;
    auto first = std::find(out->stack.begin(), out->stack.end(), key);
    std::vector<std::string> cycle(first, out->stack.end());
    std::sort(cycle.begin(), cycle.end());
    for (const std::string& k : cycle) out->cycle += k + "\n";
    out->loop.push_back(hop + (on_path->contains(key)
                                   ? "  (again)"
                                   : "  (and on: too many hops)"));
    return;
  }
  std::vector<const Detour*> ios;
  if (rule != nullptr) {
    for (const Detour& d : rule->rule().detours) {
      if (d.what == Detour::What::kIo) ios.push_back(&d);
    }
  }
  if (ios.empty()) {
    path->push_back(hop + " -> default route");
    Deliver(views, at, h.file, h, path, on_path, out, steps);
    path->pop_back();
    return;
  }
  on_path->insert(key);
  out->stack.push_back(key);
  for (const Detour* d : ios) {
    const Target& t = d->target;
    switch (t.kind) {
      case Target::Kind::kFile: {
        const std::string file =
            ResolveTargetFile(t, rule->rule().pattern.file, h.file);
        path->push_back(StrCat(hop, " -> ", rule->owner(), " -> ", file));
        Deliver(views, at, file, h, path, on_path, out, steps);
        path->pop_back();
        break;
      }
      case Target::Kind::kStage: {
        path->push_back(
            StrCat(hop, " -> ", rule->owner(), " -> ", FormatTarget(t)));
        IoHeader h2 = h;
        h2.stage = t.stage;
        const View* next = &at;
        if (!t.stage_host.empty()) {
          next = ServerAt(views, at, t.stage_host);
          if (next != nullptr) {
            FileName n;
            if (SplitFileName(h.file, &n)) {
              h2.file = JoinFileName(next->sw->view.name, n.path);
            }
          }
        } else if (at.sw->view.topology_known &&
                   !at.sw->stages.contains(t.stage)) {
          next = nullptr;  // a black hole (reported on its own)
        }
        if (next != nullptr) {
          Follow(views, *next, std::move(h2), path, on_path, out, steps);
        } else {
          out->ends.insert(StrCat(at.sw->view.name, "\x1f", FormatTarget(t)));
        }
        path->pop_back();
        break;
      }
      case Target::Kind::kController:
        out->ends.insert("controller");
        break;
    }
    if (!out->loop.empty()) break;
  }
  out->stack.pop_back();
  on_path->erase(key);
}

void Engine::BlackHoles(std::map<std::string, View>& views, const View& v,
                        RuleRec* r, const Analysis& a, Report* report) {
  const Switch& sw = *v.sw;
  auto add = [&](std::string detail) {
    Finding f;
    f.kind = FindingKind::kBlackHole;
    f.sswitch = sw.view.name;
    f.rule = r->Text();
    f.origin = r->tr.origin;
    f.rule_id = r->tr.id;
    f.detail = std::move(detail);
    f.witness = a.reach;
    report->findings.push_back(std::move(f));
  };
  for (const Detour& d : r->rule().detours) {
    const Target& t = d.target;
    if (t.kind == Target::Kind::kFile) {
      FileName name;
      std::string base = t.file;
      if (t.keeps_suffix()) base.pop_back();
      if (!SplitFileName(base, &name)) {
        add(StrCat("target ", t.file, ": the '*' would make the host name"));
        continue;
      }
      if (sw.view.topology_known &&
          !sw.endpoints.contains(std::string(name.host))) {
        add(StrCat("target ", t.file, ": ", sw.view.name, " has no endpoint ",
                   name.host));
        continue;
      }
      if (t.keeps_suffix() && r->file().kind == FilePattern::Kind::kExact &&
          (name.path.empty() || name.path.back() == '/')) {
        add(StrCat("target ", t.file,
                   ": an exact pattern leaves nothing for its '*', so every "
                   "IO goes to the directory ",
                   base));
      }
    } else if (t.kind == Target::Kind::kStage) {
      if (t.stage_host.empty()) {
        if (sw.view.topology_known && !sw.stages.contains(t.stage)) {
          add(StrCat("target stage:", t.stage, ": ", sw.view.name,
                     " has no stage ", t.stage));
        }
        continue;
      }
      FileName on;
      if (a.reach && SplitFileName(a.reach->file, &on) &&
          on.host != t.stage_host) {
        add(StrCat("target ", FormatTarget(t), " takes IOs of files on ",
                   t.stage_host, " only, and the rule matches files on ",
                   on.host));
        continue;
      }
      if (!sw.view.topology_known) continue;
      bool server = false;
      for (const auto& e : sw.view.endpoints) {
        server = server || (e.name == t.stage_host && e.kind == "server");
      }
      if (!server) {
        add(StrCat("target ", FormatTarget(t), ": ", t.stage_host,
                   " is not a storage server endpoint of ", sw.view.name));
        continue;
      }
      const View* next = ServerAt(views, v, t.stage_host);
      if (next != nullptr && next->sw->view.topology_known &&
          !next->sw->stages.contains(t.stage)) {
        add(StrCat("target ", FormatTarget(t), ": server ", next->sw->view.name,
                   " has no stage ", t.stage));
      }
    }
  }
}

void Engine::Hazards(const View& v, const std::string& file,
                     std::map<std::string, View>& views, Report* report,
                     std::set<std::string>* reported) {
  const RuleTable& t = *v.table;
  std::vector<const RuleEntry*> rules = t.RulesOfFile(file);
  std::vector<const RuleEntry*> data;  // rules that route bytes
  for (const RuleEntry* e : rules) {
    const Rule& r = e->rule();
    if (!r.is_tap() && (r.pattern.ops & (kOpClassRead | kOpClassWrite)) &&
        r.pattern.source.kind != SourcePattern::Kind::kStage) {
      data.push_back(e);
    }
  }
  if (data.empty()) return;
  // Unranged rules that each take both reads and writes route a source's
  // reads of the file exactly as its writes (the first rule matching one
  // matches the other): nothing to compare.
  if (std::all_of(data.begin(), data.end(), [](const RuleEntry* e) {
        const Rule& r = e->rule();
        return !r.pattern.file.range &&
               (r.pattern.ops & (kOpClassRead | kOpClassWrite)) ==
                   (kOpClassRead | kOpClassWrite);
      })) {
    return;
  }
  std::vector<uint64_t> cuts = {0};
  std::set<std::string> tenants;
  for (const RuleEntry* e : data) {
    const auto& range = e->rule().pattern.file.range;
    if (range) {
      cuts.push_back(range->start);
      if (range->end != kEnd) cuts.push_back(range->end);
    }
    if (e->rule().pattern.source.kind == SourcePattern::Kind::kTenant) {
      tenants.insert(e->rule().pattern.source.name);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<std::string> sources(tenants.begin(), tenants.end());
  sources.push_back(tenants.contains("tenant-x") ? "tenant-y" : "tenant-x");
  for (size_t i = 0; i < cuts.size(); ++i) {
    const uint64_t start = cuts[i];
    const uint64_t end = i + 1 < cuts.size() ? cuts[i + 1] : kEnd;
    struct Route {
      const RuleEntry* rule;
      IoHeader h;
      std::set<std::string> ends;
    };
    auto route = [&](const std::string& source, Op op) {
      Route r;
      r.h.source = source;
      r.h.op = op;
      r.h.file = file;
      r.h.offset = start;
      r.h.length = std::min<uint64_t>(end - start, kWitnessLength);
      IoHeader h = r.h;
      r.rule = Winner(t, &h);
      r.h = h;
      Trace trace;
      std::vector<std::string> path;
      std::set<std::string> on_path;
      int steps = 0;
      Follow(views, v, r.h, &path, &on_path, &trace, &steps);
      r.ends = std::move(trace.ends);
      return r;
    };
    std::vector<Route> writes, reads;
    for (const std::string& s : sources) {
      writes.push_back(route(s, Op::kWrite));
      reads.push_back(route(s, Op::kRead));
    }
    auto add = [&](FindingKind kind, const RuleEntry* rule, IoHeader witness,
                   std::string detail) {
      const std::string key = StrCat(KindName(kind), v.sw->view.name, "\x1f",
                                     rule ? rule->owner() : file, "\x1f", file);
      if (!reported->insert(key).second) return;
      Finding f;
      f.kind = kind;
      f.sswitch = v.sw->view.name;
      if (rule != nullptr) {
        f.rule = FormatRule(rule->rule());
        f.origin = rule->owner();
      } else {
        f.rule = "(default route)";
        f.origin = file;
      }
      f.detail = std::move(detail);
      f.witness = std::move(witness);
      report->findings.push_back(std::move(f));
    };
    // Where IOs end: FILE, and "FILE at SSWITCH" off this sSwitch.
    auto describe = [&](const std::set<std::string>& ends) {
      std::string out;
      for (const std::string& e : ends) {
        const size_t cut = e.find('\x1f');
        std::string where =
            cut == std::string::npos ? e
            : e.substr(0, cut) == v.sw->view.name
                ? e.substr(cut + 1)
                : StrCat(e.substr(cut + 1), " at ", e.substr(0, cut));
        out += (out.empty() ? "" : ", ") + where;
      }
      return out.empty() ? std::string("nowhere") : out;
    };
    for (const Route& rd : reads) {
      for (const Route& wr : writes) {
        if (wr.rule != nullptr && HasTrackWrites(wr.rule->rule())) {
          IoHeader probe = rd.h;
          if (wr.rule->rule().pattern.source.Matches(probe)) continue;
        }
        if (rd.ends.empty() || wr.ends.empty()) continue;
        bool sees = true;
        for (const std::string& e : rd.ends) {
          if (e != "controller" && !wr.ends.contains(e)) sees = false;
        }
        if (sees) continue;
        const RuleEntry* subject = rd.rule != nullptr ? rd.rule : wr.rule;
        add(FindingKind::kReadWriteHazard, subject, rd.h,
            StrCat("reads of ", Printable(file), FormatRange(start, end),
                   " by ", rd.h.source, " go to ", describe(rd.ends),
                   " but writes by ", wr.h.source, " go to ", describe(wr.ends),
                   " (", wr.rule ? wr.rule->owner() : "default route",
                   "): reads miss those writes"));
      }
    }
    // Scatter rules whose writes a ranged rule takes elsewhere.
    for (const Route& wr : writes) {
      if (wr.rule == nullptr || !wr.rule->rule().pattern.file.range) continue;
      for (const RuleEntry* e : data) {
        const Rule& s = e->rule();
        int ios = 0;
        for (const Detour& d : s.detours) ios += d.what == Detour::What::kIo;
        if (e == wr.rule || ios < 2 || !(s.pattern.ops & kOpClassWrite) ||
            !s.pattern.source.Matches(wr.h) ||
            (s.pattern.file.range &&
             !s.pattern.file.range->Overlaps(start, end))) {
          continue;
        }
        if (s.detours == wr.rule->rule().detours) continue;
        add(FindingKind::kScatterHazard, wr.rule, wr.h,
            StrCat("writes of ", Printable(file), FormatRange(start, end),
                   " by ", wr.h.source, " go to ", describe(wr.ends),
                   " only: ", "the scatter rule ", e->owner(), " (",
                   FormatRule(s), ") would write them to each of its targets"));
        break;
      }
    }
  }
}

}  // namespace sroute::check::internal

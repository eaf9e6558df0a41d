// SPDX-License-Identifier: Apache-2.0
// One rule against those before it: shadowed, partly shadowed, what
// witness shows it (check/engine.h).
#include "check/engine.h"

namespace sroute::check::internal {

std::string Engine::FreshName(const View& v, RuleRec* r,
                              const std::vector<RuleRec*>& avoid) {
  static constexpr std::string_view kSuffixes[] = {"x", "y", "z", "new", "f0"};
  auto free_of = [&](const std::string& name) {
    for (RuleRec* o : avoid) {
      if (o->MatchesName(name)) return false;
    }
    return !v.NameUsed(name) || r->file().kind == FilePattern::Kind::kPrefix;
  };
  const FilePattern& f = r->file();
  for (int i = 0; i < 1000; ++i) {
    std::string name;
    const std::string_view s = kSuffixes[i % std::size(kSuffixes)];
    const std::string n = i < static_cast<int>(std::size(kSuffixes))
                              ? std::string(s)
                              : StrCat(s, i);
    if (f.kind == FilePattern::Kind::kPrefix) {
      name = f.text + n;
    } else {
      name = StrCat("//sroute-witness", i == 0 ? "" : StrCat(i), "/x");
    }
    if (free_of(name)) return name;
  }
  return "";
}

bool Engine::Covered(const View& v, RuleRec* r,
                     const std::vector<RuleRec*>& rel, std::string* witness,
                     std::string* why) {
  using K = FilePattern::Kind;
  const FilePattern& f = r->file();
  why->clear();
  if (f.kind == K::kExact) {
    for (RuleRec* o : rel) {
      if (o->MatchesName(f.text)) return true;
    }
    *witness = f.text;
    return false;
  }
  bool regex = f.kind == K::kRegex;
  for (RuleRec* o : rel) {
    if (o->file().kind == K::kAny) return true;
    if (f.kind == K::kPrefix && o->file().kind == K::kPrefix &&
        f.text.starts_with(o->file().text)) {
      return true;
    }
    regex = regex || o->file().kind == K::kRegex;
  }
  if (!regex) {
    *witness = FreshName(v, r, rel);
    if (witness->empty()) *why = "no name found outside the rules before it";
    return false;
  }
  // Regexes: compare automata.
  const auto& mine = r->Files();
  if (!mine.ok()) {
    *why = std::string(mine.status().message());
    return false;
  }
  std::vector<const FileSet*> out;
  std::vector<RuleRec*> opaque;  // regexes FileSet cannot model
  if (rel.size() > kMaxAutomatonPatterns) {
    *why = StrCat("more than ", kMaxAutomatonPatterns,
                  " patterns meet this regex");
    return false;
  }
  for (RuleRec* o : rel) {
    const auto& fs = o->Files();
    if (fs.ok()) {
      out.push_back(&*fs);
    } else {
      opaque.push_back(o);
    }
  }
  bool gave_up = false;
  std::optional<std::string> name = FindWitness({&*mine}, out, &gave_up);
  if (gave_up) {
    *why = "the regexes' automata are too large to compare";
    return false;
  }
  if (!name) return true;
  for (RuleRec* o : opaque) {
    if (o->MatchesName(*name)) {
      *why = StrCat("cannot model the regex of ", o->tr.origin, ": ",
                    o->Files().status().message());
      return false;
    }
  }
  *witness = *name;
  return false;
}

Analysis Engine::Analyse(const View& v, RuleRec* r) {
  Analysis a;
  const Rule& rule = r->rule();
  if (rule.is_tap()) return a;
  const HeaderPattern& p = rule.pattern;
  std::vector<OpAtom> ops;
  for (const OpAtom& op : kOpAtoms) {
    if ((p.ops & op.cls) && (op.extent || !r->ranged())) ops.push_back(op);
  }
  if (ops.empty()) {
    a.never_matches = true;
    return a;
  }
  // Rules before r that may take some of its headers.
  std::vector<RuleRec*> before;
  auto keep = [&](RuleRec* o) {
    if (o->Before(*r) && !o->rule().is_tap() &&
        SourceMeets(o->rule().pattern.source, p.source) &&
        (o->rule().pattern.ops & p.ops) != 0) {
      if (!o->ranged() || !r->ranged() ||
          o->file().range->Overlaps(r->file().range->start,
                                    r->file().range->end)) {
        before.push_back(o);
      }
    }
  };
  v.ForEachFileNeighbour(r, /*with_names=*/false, keep);
  if (r->file().kind == FilePattern::Kind::kAny &&
      std::any_of(before.begin(), before.end(), [](RuleRec* o) {
        return o->file().kind == FilePattern::Kind::kRegex;
      })) {
    // A regex and names together may cover '*': take the names in too.
    before.clear();
    v.ForEachFileNeighbour(r, /*with_names=*/true, keep);
  }
  std::sort(before.begin(), before.end());
  before.erase(std::unique(before.begin(), before.end()), before.end());

  // Source atoms: the tenants rules before it name, and one they do not.
  struct Src {
    std::string source, stage;
  };
  std::vector<Src> sources;
  const std::string other = OtherTenant(before);
  if (p.source.kind == SourcePattern::Kind::kStage) {
    sources.push_back({other, p.source.name});
  } else if (p.source.kind == SourcePattern::Kind::kTenant) {
    sources.push_back({p.source.name, ""});
  } else {
    std::set<std::string> named;
    for (RuleRec* o : before) {
      if (o->rule().pattern.source.kind == SourcePattern::Kind::kTenant) {
        named.insert(o->rule().pattern.source.name);
      }
    }
    for (const std::string& t : named) sources.push_back({t, ""});
    sources.push_back({other, ""});
  }
  // Byte pieces: r's range cut at every range boundary of the rules before.
  const uint64_t lo = r->ranged() ? r->file().range->start : 0;
  const uint64_t hi = r->ranged() ? r->file().range->end : kEnd;
  std::vector<uint64_t> cuts = {lo, hi};
  for (RuleRec* o : before) {
    if (!o->ranged()) continue;
    for (uint64_t c : {o->file().range->start, o->file().range->end}) {
      if (c > lo && c < hi) cuts.push_back(c);
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());

  auto header = [&](const Src& s, const OpAtom& op, const std::string& file,
                    uint64_t start, uint64_t end) {
    IoHeader h;
    h.source = s.source;
    h.stage = s.stage;
    h.op = op.op;
    h.file = file;
    if (op.extent) {
      h.offset = start;
      h.length = std::min<uint64_t>(end - start, kWitnessLength);
    }
    return h;
  };
  // The rules of `before` that take headers of (s, op) over [start, end).
  auto relevant = [&](const Src& s, const OpAtom& op, uint64_t start,
                      uint64_t end) {
    std::vector<RuleRec*> rel;
    IoHeader probe;
    probe.source = s.source;
    probe.stage = s.stage;
    for (RuleRec* o : before) {
      const HeaderPattern& q = o->rule().pattern;
      if (!q.source.Matches(probe) || !(q.ops & op.cls)) continue;
      if (o->ranged() && (!op.extent || o->file().range->start > start ||
                          o->file().range->end < end)) {
        continue;
      }
      rel.push_back(o);
    }
    return rel;
  };
  std::string sample_file;
  auto cell_open = [&](const Src& s, const OpAtom& op, uint64_t start,
                       uint64_t end) -> bool {
    std::string witness, why;
    const bool covered =
        Covered(v, r, relevant(s, op, start, end), &witness, &why);
    if (!why.empty()) {
      if (a.not_analysed.empty()) a.not_analysed = why;
      return true;  // undecided counts as open: never a false "shadowed"
    }
    if (covered) {
      if (!a.sample) {
        const std::string file =
            r->file().kind == FilePattern::Kind::kExact ? r->file().text : "";
        if (!file.empty()) a.sample = header(s, op, file, start, end);
      }
      return false;
    }
    if (!a.reach) a.reach = header(s, op, witness, start, end);
    return true;
  };

  // Headers without a byte extent (only for rules without a range).
  bool open = false;
  for (const OpAtom& op : ops) {
    if (op.extent) continue;
    for (const Src& s : sources) {
      if (cell_open(s, op, 0, 0)) {
        open = true;
        break;
      }
    }
    if (open) break;
  }
  // Byte pieces.
  bool any_piece_open = false;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (open && !r->ranged()) break;  // reached already
    bool piece_open = false;
    for (const OpAtom& op : ops) {
      if (!op.extent) continue;
      for (const Src& s : sources) {
        if (cell_open(s, op, cuts[i], cuts[i + 1])) {
          piece_open = true;
          break;
        }
      }
      if (piece_open) break;
    }
    any_piece_open = any_piece_open || piece_open;
    if (!piece_open && r->ranged()) {
      if (!a.covered.empty() && a.covered.back().second == cuts[i]) {
        a.covered.back().second = cuts[i + 1];
      } else {
        a.covered.push_back({cuts[i], cuts[i + 1]});
      }
    }
  }
  open = open || any_piece_open;
  if (!a.not_analysed.empty() && !a.reach) return a;
  a.shadowed = !open;
  if (a.shadowed) {
    a.covered.clear();
    if (!a.sample) {
      // A header r matches (any of them is taken by a rule before it).
      std::string name = r->file().kind == FilePattern::Kind::kExact
                             ? r->file().text
                             : FreshName(v, r, {});
      if (r->file().kind == FilePattern::Kind::kRegex && r->Files().ok()) {
        name = FindWitness({&*r->Files()}, {}).value_or("");
      }
      a.sample = header(sources.front(), ops.front(), name, lo, hi);
    }
  }
  return a;
}

}  // namespace sroute::check::internal

// SPDX-License-Identifier: Apache-2.0
// The rule checker's engine, internal to check/: rules indexed per sSwitch
// (Switch), a switch with a change applied (View), and the Engine whose
// passes find shadowing, loops, black holes and hazards. Its definitions:
//   check/engine.cc    the helpers below (names, witnesses, winners)
//   check/analysis.cc  one rule against those before it (Analyse:
//                      shadowed, partly shadowed, coverage)
//   check/paths.cc     where IOs go: servers, loops, black holes, hazards
//   check/findings.cc  the passes over a view put together (Findings)
// check/checker.cc is the public API (check/checker.h).
#ifndef SROUTE_CHECK_ENGINE_H_
#define SROUTE_CHECK_ENGINE_H_

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "check/checker.h"
#include "check/file_set.h"
#include "re2/re2.h"
#include "rules/parser.h"
#include "util/strings.h"

namespace sroute::check::internal {

inline constexpr uint64_t kEnd = UINT64_MAX;
// Witness IOs are at most this long (a page: what a program would issue).
inline constexpr uint64_t kWitnessLength = 4096;
// Hops a traced IO may take before the checker calls it a loop.
inline constexpr int kMaxHops = 16;
// File patterns one automaton comparison may take (past it: not-analysed).
inline constexpr size_t kMaxAutomatonPatterns = 4000;

// Op classes as the matcher sees them: a class, and whether the op has a
// byte extent (only those meet ranged rules). A representative op each.
struct OpAtom {
  OpClass cls;
  bool extent;
  Op op;
};
inline constexpr OpAtom kOpAtoms[] = {
    {kOpClassRead, true, Op::kRead},      {kOpClassRead, false, Op::kGetattr},
    {kOpClassWrite, true, Op::kWrite},    {kOpClassWrite, false, Op::kFsync},
    {kOpClassCreate, false, Op::kCreate}, {kOpClassDelete, false, Op::kUnlink},
};

// A string every match of RE2 regex `re` starts with: its leading literal
// characters (none if an alternative is at the top level).
std::string LiteralPrefix(std::string_view re);

// A name in every set of `in` and none of `out`, a file's name (non-empty
// PATH) if there is one, else an endpoint's root.
std::optional<std::string> FindWitness(std::vector<const FileSet*> in,
                                       const std::vector<const FileSet*>& out,
                                       bool* gave_up = nullptr);

bool SourceMeets(const SourcePattern& a, const SourcePattern& b);

// `name` with control characters and non-UTF-8 bytes escaped (C style), so
// a witness with a newline in its name prints on one line.
std::string Printable(std::string_view name);

std::string FormatHeader(const IoHeader& h);

std::string FormatRange(uint64_t a, uint64_t b);

// One rule in the checker.
struct RuleRec {
  TableRule tr;
  uint64_t key = 0;  // unique in the checker: the table entries' ids
  std::string text;  // FormatRule, or empty until Text()
  // Compiled lazily: the file set, or why it cannot be modelled.
  std::optional<absl::StatusOr<FileSet>> files;
  std::unique_ptr<RE2> regex;

  // The rule itself lives in `entry` (tr.rule is moved there), shared with
  // the table that routes witnesses.
  RuleEntryPtr entry;
  const Rule& rule() const { return entry->rule(); }
  const FilePattern& file() const { return entry->rule().pattern.file; }
  // Its text, made when a finding needs it.
  const std::string& Text() {
    if (text.empty()) text = FormatRule(rule());
    return text;
  }
  bool ranged() const { return file().range.has_value(); }
  bool Before(const RuleRec& o) const { return tr.order < o.tr.order; }
  const absl::StatusOr<FileSet>& Files() {
    if (!files) files = FileSet::Of(file());
    return *files;
  }
  // Whether `name` is in the file pattern (exact for every kind: regexes
  // through RE2 itself).
  bool MatchesName(std::string_view name) {
    if (file().kind != FilePattern::Kind::kRegex) {
      return file().MatchesName(name);
    }
    Compile();
    if (!name.starts_with(literal)) return false;
    return regex->ok() && RE2::FullMatch(name, *regex);
  }
  // Every name the regex matches starts with `literal` (cheap filter).
  std::string literal;
  void Compile() {
    if (regex != nullptr) return;
    RE2::Options opts;
    opts.set_log_errors(false);
    regex = std::make_unique<RE2>(file().text, opts);
    literal = LiteralPrefix(file().text);
  }
};

// One sSwitch's rules, indexed by file pattern.
struct Switch {
  SwitchView view;  // rules moved out into `rules`
  absl::flat_hash_set<std::string> endpoints, stages;
  absl::flat_hash_map<uint64_t, std::unique_ptr<RuleRec>> rules;  // by key
  // Keys by TableRule::id (ids need not be unique: rules of a file are
  // numbered per file).
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> keys_of_id;
  absl::flat_hash_map<std::string, std::vector<RuleRec*>> exact, prefix;
  std::map<std::string, std::vector<RuleRec*>, std::less<>> sorted;
  std::set<size_t> prefix_lengths;
  std::vector<RuleRec*> any, regex;
  RuleTablePtr table = RuleTable::Empty();

  void Index(RuleRec* r) {
    const FilePattern& f = r->file();
    switch (f.kind) {
      case FilePattern::Kind::kAny:
        any.push_back(r);
        break;
      case FilePattern::Kind::kExact:
        exact[f.text].push_back(r);
        sorted[f.text].push_back(r);
        break;
      case FilePattern::Kind::kPrefix:
        prefix[f.text].push_back(r);
        sorted[f.text].push_back(r);
        prefix_lengths.insert(f.text.size());
        break;
      case FilePattern::Kind::kRegex:
        regex.push_back(r);
        break;
    }
  }
  void Unindex(RuleRec* r) {
    auto drop = [r](std::vector<RuleRec*>& v) {
      v.erase(std::remove(v.begin(), v.end(), r), v.end());
    };
    const FilePattern& f = r->file();
    switch (f.kind) {
      case FilePattern::Kind::kAny:
        drop(any);
        break;
      case FilePattern::Kind::kExact:
        drop(exact[f.text]);
        drop(sorted[f.text]);
        break;
      case FilePattern::Kind::kPrefix:
        drop(prefix[f.text]);
        drop(sorted[f.text]);
        break;
      case FilePattern::Kind::kRegex:
        drop(regex);
        break;
    }
  }
};

inline std::shared_ptr<const RuleEntry> EntryOf(const RuleRec& r) {
  return r.entry;
}

// A switch as a check sees it: its indexed rules, minus `removed`, plus
// `added` (a change being checked), and the table routing that.
struct View {
  Switch* sw = nullptr;
  std::vector<RuleRec*> added;
  absl::flat_hash_set<uint64_t> removed;
  RuleTablePtr table;

  bool Live(const RuleRec* r) const { return !removed.contains(r->key); }

  // Rules whose file pattern may share a name with `r`'s (every kind),
  // for the checks of `r`. For a '*' file only '*' and regex rules (an
  // exact or prefix rule can never cover '*'; the witness avoids them).
  template <typename Fn>
  void ForEachFileNeighbour(RuleRec* r, bool with_names, Fn fn) const {
    const FilePattern& f = r->file();
    auto each = [&](const std::vector<RuleRec*>& v) {
      for (RuleRec* o : v) {
        if (o != r && Live(o)) fn(o);
      }
    };
    auto regexes = [&](auto meets) {
      for (RuleRec* o : sw->regex) {
        if (o != r && Live(o) && meets(o)) fn(o);
      }
    };
    switch (f.kind) {
      case FilePattern::Kind::kExact: {
        if (auto it = sw->exact.find(f.text); it != sw->exact.end()) {
          each(it->second);
        }
        EachPrefixOf(f.text, each);
        each(sw->any);
        regexes([&](RuleRec* o) { return o->MatchesName(f.text); });
        break;
      }
      case FilePattern::Kind::kPrefix: {
        EachPrefixOf(f.text, each);  // ancestors (and itself)
        for (auto it = sw->sorted.upper_bound(f.text);
             it != sw->sorted.end() && it->first.starts_with(f.text); ++it) {
          each(it->second);  // names and prefixes under it
        }
        if (auto it = sw->exact.find(f.text); it != sw->exact.end()) {
          each(it->second);
        }
        each(sw->any);
        regexes([&](RuleRec* o) { return RegexMeetsPrefix(o, f.text); });
        break;
      }
      case FilePattern::Kind::kAny:
      case FilePattern::Kind::kRegex:
        each(sw->any);
        regexes([](RuleRec*) { return true; });
        if (f.kind == FilePattern::Kind::kRegex && !with_names) {
          // Every name it matches starts with its literal prefix: names and
          // prefixes under it, and prefixes of it.
          r->Compile();
          const std::string& lit = r->literal;
          auto meeting = [&](const std::vector<RuleRec*>& v) {
            for (RuleRec* o : v) {
              if (o != r && Live(o) && Meets(r, o)) fn(o);
            }
          };
          EachPrefixOf(lit, meeting);
          for (auto it = sw->sorted.lower_bound(lit);
               it != sw->sorted.end() && it->first.starts_with(lit); ++it) {
            if (it->first.size() == lit.size() && sw->prefix.contains(lit)) {
              // A prefix equal to the literal was met above; names too.
              std::vector<RuleRec*> names;
              for (RuleRec* o : it->second) {
                if (o->file().kind == FilePattern::Kind::kExact) {
                  names.push_back(o);
                }
              }
              meeting(names);
              continue;
            }
            meeting(it->second);
          }
        } else if (with_names) {
          for (auto& [text, v] : sw->sorted) {
            for (RuleRec* o : v) {
              if (o != r && Live(o) &&
                  (f.kind == FilePattern::Kind::kAny || Meets(r, o))) {
                fn(o);
              }
            }
          }
        }
        break;
    }
    for (RuleRec* o : added) {
      if (o != r && Meets(r, o)) fn(o);
    }
  }

  template <typename Fn>
  void EachPrefixOf(const std::string& name, Fn each) const {
    for (size_t len : sw->prefix_lengths) {
      if (len > name.size()) break;
      auto it = sw->prefix.find(absl::string_view(name.data(), len));
      if (it != sw->prefix.end()) each(it->second);
    }
  }

  static bool RegexMeetsPrefix(RuleRec* re, const std::string& prefix) {
    re->Compile();
    if (!prefix.starts_with(re->literal) &&
        !std::string_view(re->literal).starts_with(prefix)) {
      return false;
    }
    const auto& fs = re->Files();
    if (!fs.ok()) return true;  // unknown: keep it as a neighbour
    const FileSet p = FileSet::Prefix(prefix);
    return FindName({&*fs, &p, &FileSet::Valid()}, {}).has_value();
  }

  // Whether the file patterns of `a` and `b` share a name.
  static bool Meets(RuleRec* a, RuleRec* b) {
    using K = FilePattern::Kind;
    const FilePattern& fa = a->file();
    const FilePattern& fb = b->file();
    if (fa.kind == K::kAny || fb.kind == K::kAny) return true;
    if (fa.kind == K::kExact) return b->MatchesName(fa.text);
    if (fb.kind == K::kExact) return a->MatchesName(fb.text);
    if (fa.kind == K::kPrefix && fb.kind == K::kPrefix) {
      return fa.text.starts_with(fb.text) || fb.text.starts_with(fa.text);
    }
    const auto& sa = a->Files();
    const auto& sb = b->Files();
    if (!sa.ok() || !sb.ok()) return true;
    return FindName({&*sa, &*sb, &FileSet::Valid()}, {}).has_value();
  }

  // Whether `name` is taken by an exact or prefix rule of the view.
  bool NameUsed(const std::string& name) const {
    bool used = false;
    auto mark = [&](const std::vector<RuleRec*>& v) {
      for (RuleRec* o : v) used = used || Live(o);
    };
    if (auto it = sw->exact.find(name); it != sw->exact.end()) mark(it->second);
    EachPrefixOf(name, mark);
    for (RuleRec* o : added) {
      const auto k = o->file().kind;
      if ((k == FilePattern::Kind::kExact || k == FilePattern::Kind::kPrefix) &&
          o->file().MatchesName(name)) {
        used = true;
      }
    }
    return used;
  }
};

// What the analysis of one rule found.
struct Analysis {
  bool never_matches = false;
  bool shadowed = false;
  std::optional<IoHeader> reach;   // a header the rule wins
  std::optional<IoHeader> sample;  // a header it matches (shadowed: taken)
  std::vector<std::pair<uint64_t, uint64_t>> covered;  // partly shadowed
  std::string not_analysed;  // why not, if it could not decide
};

class Engine {
 public:
  explicit Engine(std::vector<SwitchView> views) {
    for (SwitchView& v : views) {
      auto sw = std::make_unique<Switch>();
      std::vector<TableRule> rules = std::move(v.rules);
      v.rules.clear();
      sw->view = std::move(v);
      for (const auto& e : sw->view.endpoints) sw->endpoints.insert(e.name);
      for (const auto& s : sw->view.stages) sw->stages.insert(s);
      std::vector<RuleEntryPtr> entries;
      for (TableRule& tr : rules) {
        RuleRec* r = AddRec(*sw, std::move(tr));
        entries.push_back(EntryOf(*r));
      }
      sw->table = RuleTable::Build(std::move(entries));
      switches_[sw->view.name] = std::move(sw);
    }
  }

  Switch* Find(const std::string& name) {
    auto it = switches_.find(name);
    return it == switches_.end() ? nullptr : it->second.get();
  }
  Switch& Get(const std::string& name) {
    auto& sw = switches_[name];
    if (sw == nullptr) {
      sw = std::make_unique<Switch>();
      sw->view.name = name;
    }
    return *sw;
  }

  // A record of `tr` with a fresh key, its rule moved into its entry.
  std::unique_ptr<RuleRec> NewRec(TableRule tr) {
    auto r = std::make_unique<RuleRec>();
    r->key = next_key_++;
    r->entry = std::make_shared<RuleEntry>(r->key, tr.order, std::move(tr.rule),
                                           tr.origin);
    r->tr = std::move(tr);
    return r;
  }

  RuleRec* AddRec(Switch& sw, TableRule tr) {
    std::unique_ptr<RuleRec> r = NewRec(std::move(tr));
    RuleRec* raw = r.get();
    sw.keys_of_id[raw->tr.id].push_back(raw->key);
    sw.rules[raw->key] = std::move(r);
    sw.Index(raw);
    return raw;
  }

  // The views of every switch, `change` (if any) in place of its own.
  // Every switch as it is.
  void Views(std::map<std::string, View>* out) {
    for (auto& [name, sw] : switches_) {
      View v;
      v.sw = sw.get();
      v.table = sw->table;
      (*out)[name] = std::move(v);
    }
  }

  Analysis Analyse(const View& v, RuleRec* r);
  void Findings(std::map<std::string, View>& views,
                const std::vector<std::pair<std::string, RuleRec*>>& subjects,
                Report* report);

  std::map<std::string, std::unique_ptr<Switch>> switches_;
  uint64_t next_key_ = 1;

 private:
  struct Cell;
  // Whether the names of `r` are all in the sets of `rel`; if not, a name
  // of `r` outside them in *witness. Empty *why on an answer.
  bool Covered(const View& v, RuleRec* r, const std::vector<RuleRec*>& rel,
               std::string* witness, std::string* why);
  std::string FreshName(const View& v, RuleRec* r,
                        const std::vector<RuleRec*>& avoid);
  // Loops, black holes' reach and hazards through the views.
  struct Trace {
    std::set<std::string> ends;  // "SSWITCH:FILE" where the IO lands
    std::vector<std::string> loop;
    bool record = false;             // write out `loop`'s hops
    std::vector<std::string> stack;  // state keys on the path
    std::string cycle;  // the loop's states, sorted: one finding a loop
  };
  void Follow(std::map<std::string, View>& views, const View& at, IoHeader h,
              std::vector<std::string>* path, std::set<std::string>* on_path,
              Trace* out, int* steps);
  void Deliver(std::map<std::string, View>& views, const View& at,
               const std::string& file, const IoHeader& h,
               std::vector<std::string>* path, std::set<std::string>* on_path,
               Trace* out, int* steps);
  const View* ServerAt(std::map<std::string, View>& views, const View& at,
                       const std::string& endpoint);
  void BlackHoles(std::map<std::string, View>& views, const View& v, RuleRec* r,
                  const Analysis& a, Report* report);
  void Hazards(const View& v, const std::string& file,
               std::map<std::string, View>& views, Report* report,
               std::set<std::string>* reported);
};

// A tenant name no rule of `rel` names.
std::string OtherTenant(const std::vector<RuleRec*>& rel);

// A read or write header both `a` and `b` match (ranged or not), if any.
std::optional<IoHeader> Meeting(RuleRec* a, RuleRec* b);

// The rule of `t` that routes `*h` first (its extent set to that piece's),
// or null.
const RuleEntry* Winner(const RuleTable& t, IoHeader* h);

// Whether an IO `rule` routes at `v` may go to a stage or another sSwitch.
inline bool MayLeave(const View& v, const Rule& rule) {
  for (const Detour& d : rule.detours) {
    if (d.what != Detour::What::kIo) continue;
    if (d.target.kind == Target::Kind::kStage) return true;
    if (d.target.kind != Target::Kind::kFile) continue;
    FileName name;
    if (!SplitFileName(d.target.file, &name)) continue;
    for (const auto& e : v.sw->view.endpoints) {
      if (e.name == name.host && e.kind == "server") return true;
    }
  }
  return false;
}

inline bool HasTrackWrites(const Rule& r) {
  return r.delegate && r.delegate->name == "track_writes";
}

}  // namespace sroute::check::internal

#endif  // SROUTE_CHECK_ENGINE_H_

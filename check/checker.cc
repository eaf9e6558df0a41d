// SPDX-License-Identifier: Apache-2.0
// Over 1 200 lines: the checker's passes share its index and witness
// machinery; splitting them by pass (shadowing, loops, hazards) into files
// of their own is planned with the layout work of issue 52.
#include "check/checker.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "check/file_set.h"
#include "re2/re2.h"
#include "rules/parser.h"
#include "util/strings.h"

namespace sroute::check {
namespace {

constexpr uint64_t kEnd = UINT64_MAX;
// Witness IOs are at most this long (a page: what a program would issue).
constexpr uint64_t kWitnessLength = 4096;
// Hops a traced IO may take before the checker calls it a loop.
constexpr int kMaxHops = 16;
// File patterns one automaton comparison may take (past it: not-analysed).
constexpr size_t kMaxAutomatonPatterns = 4000;

// Op classes as the matcher sees them: a class, and whether the op has a
// byte extent (only those meet ranged rules). A representative op each.
struct OpAtom {
  OpClass cls;
  bool extent;
  Op op;
};
constexpr OpAtom kOpAtoms[] = {
    {kOpClassRead, true, Op::kRead},      {kOpClassRead, false, Op::kGetattr},
    {kOpClassWrite, true, Op::kWrite},    {kOpClassWrite, false, Op::kFsync},
    {kOpClassCreate, false, Op::kCreate}, {kOpClassDelete, false, Op::kUnlink},
};

// A string every match of RE2 regex `re` starts with: its leading literal
// characters (none if an alternative is at the top level).
std::string LiteralPrefix(std::string_view re) {
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      return "";
    }
  }
  std::string out;
  size_t i = re.starts_with("^") ? 1 : 0;
  while (i < re.size()) {
    char c = re[i];
    size_t next = i + 1;
    if (c == '\\') {
      if (i + 1 >= re.size()) break;
      c = re[i + 1];
      if (std::isalnum(static_cast<unsigned char>(c))) break;  // a class
      next = i + 2;
    } else if (std::string_view(".^$|?*+()[]{}").find(c) !=
               std::string_view::npos) {
      break;
    }
    // A quantifier after it makes the character optional.
    if (next < re.size() &&
        std::string_view("?*{").find(re[next]) != std::string_view::npos) {
      break;
    }
    out.push_back(c);
    i = next;
  }
  return out;
}

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

// A name in every set of `in` and none of `out`, a file's name (non-empty
// PATH) if there is one, else an endpoint's root.
std::optional<std::string> FindWitness(std::vector<const FileSet*> in,
                                       const std::vector<const FileSet*>& out,
                                       bool* gave_up = nullptr) {
  in.push_back(&FileSet::NonRoot());
  std::optional<std::string> name = FindName(in, out, 20000, gave_up);
  if (name || (gave_up != nullptr && *gave_up)) return name;
  in.back() = &FileSet::Valid();
  return FindName(in, out, 20000, gave_up);
}

bool SourceMeets(const SourcePattern& a, const SourcePattern& b) {
  using K = SourcePattern::Kind;
  if (a.kind == K::kStage || b.kind == K::kStage) {
    return a.kind == b.kind && a.name == b.name;
  }
  return a.kind == K::kAny || b.kind == K::kAny || a.name == b.name;
}

// `name` with control characters and non-UTF-8 bytes escaped (C style), so
// a witness with a newline in its name prints on one line.
std::string Printable(std::string_view name) {
  std::string out;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (u < 0x20 || u == 0x7F) {
      out +=
          StrCat("\\x", "0123456789abcdef"[u >> 4], "0123456789abcdef"[u & 15]);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string FormatHeader(const IoHeader& h) {
  std::string src = h.stage.empty()
                        ? h.source
                        : StrCat("stage:", h.stage, " (", h.source, ")");
  std::string out =
      StrCat("<", src, ", ", OpName(h.op), ", ", Printable(h.file));
  if (HasByteExtent(h.op)) {
    out += StrCat(", ", h.offset, ", ", h.length);
  }
  return out + ">";
}

std::string FormatRange(uint64_t a, uint64_t b) {
  return StrCat("[", FormatSize(a), ":", b == kEnd ? "" : FormatSize(b), "]");
}

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

std::shared_ptr<const RuleEntry> EntryOf(const RuleRec& r) { return r.entry; }

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
std::string OtherTenant(const std::vector<RuleRec*>& rel) {
  for (int i = 0;; ++i) {
    std::string name = i == 0 ? "tenant-x" : StrCat("tenant-x", i);
    bool used = false;
    for (RuleRec* o : rel) used = used || o->rule().pattern.source.name == name;
    if (!used) return name;
  }
}

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

// A read or write header both `a` and `b` match (ranged or not), if any.
std::optional<IoHeader> Meeting(RuleRec* a, RuleRec* b) {
  const HeaderPattern& pa = a->rule().pattern;
  const HeaderPattern& pb = b->rule().pattern;
  if (!SourceMeets(pa.source, pb.source)) return std::nullopt;
  IoHeader h;
  h.source = "tenant-x";
  if (pa.source.kind == SourcePattern::Kind::kStage) {
    h.stage = pa.source.name;
  } else if (pa.source.kind == SourcePattern::Kind::kTenant) {
    h.source = pa.source.name;
  } else if (pb.source.kind == SourcePattern::Kind::kTenant) {
    h.source = pb.source.name;
  }
  const OpClassMask ops = pa.ops & pb.ops;
  if (ops & kOpClassRead) {
    h.op = Op::kRead;
  } else if (ops & kOpClassWrite) {
    h.op = Op::kWrite;
  } else {
    return std::nullopt;
  }
  uint64_t lo = 0, hi = kEnd;
  for (RuleRec* r : {a, b}) {
    if (r->ranged()) {
      lo = std::max(lo, r->file().range->start);
      hi = std::min(hi, r->file().range->end);
    }
  }
  if (lo >= hi) return std::nullopt;
  h.offset = lo;
  h.length = std::min(hi - lo, kWitnessLength);
  using K = FilePattern::Kind;
  const FilePattern& fa = a->file();
  const FilePattern& fb = b->file();
  if (fa.kind == K::kExact || fb.kind == K::kExact) {
    const std::string& name = fa.kind == K::kExact ? fa.text : fb.text;
    if (!a->MatchesName(name) || !b->MatchesName(name)) return std::nullopt;
    h.file = name;
    return h;
  }
  const auto& sa = a->Files();
  const auto& sb = b->Files();
  if (!sa.ok() || !sb.ok()) return std::nullopt;
  std::optional<std::string> name = FindWitness({&*sa, &*sb}, {});
  if (!name) return std::nullopt;
  h.file = *name;
  return h;
}

const RuleEntry* Winner(const RuleTable& t, IoHeader* h) {
  RuleTable::Pieces pieces;
  t.Route(*h, &pieces);
  if (pieces.empty()) return nullptr;
  if (HasByteExtent(h->op)) {
    h->offset = pieces[0].offset;
    h->length = pieces[0].length;
  }
  return pieces[0].rule;
}

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

// Whether an IO `rule` routes at `v` may go to a stage or another sSwitch.
bool MayLeave(const View& v, const Rule& rule) {
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

bool HasTrackWrites(const Rule& r) {
  return r.delegate && r.delegate->name == "track_writes";
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

}  // namespace

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
  std::vector<TableRule> out;
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<Rule> r = ParseRule(texts[i]);
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          StrCat("rule ", i + 1, ": ", r.status().message()));
    }
    TableRule t;
    t.order.priority = r->priority;
    t.order.seq = (uint64_t{1} << 62) + i;  // after every installed rule
    t.rule = *std::move(r);
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

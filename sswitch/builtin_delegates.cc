// SPDX-License-Identifier: Apache-2.0
// The built-in delegates: pick, notify, track_writes and trace.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "rules/parser.h"
#include "sswitch/delegate.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

std::vector<uint16_t> IoDetourIndices(const Rule& rule) {
  std::vector<uint16_t> out;
  for (size_t i = 0; i < rule.detours.size(); ++i) {
    if (rule.detours[i].what == Detour::What::kIo) {
      out.push_back(static_cast<uint16_t>(i));
    }
  }
  return out;
}

uint64_t FastRandom() {
  thread_local uint64_t state = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) | rd() | 1;
  }();
  // xorshift64*
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return state * 0x2545F4914F6CDD1DULL;
}

// pick(random | first | weighted, W1, W2, ...): sends each IO to one of the
// rule's IO detours instead of all of them.
class Pick : public Delegate {
 public:
  enum class Mode { kRandom, kFirst, kWeighted };
  Pick(Mode mode, std::vector<uint16_t> detours, std::vector<uint64_t> weights)
      : mode_(mode), detours_(std::move(detours)) {
    uint64_t sum = 0;
    for (uint64_t w : weights) cumulative_.push_back(sum += w);
  }

  static absl::StatusOr<std::unique_ptr<Delegate>> Create(
      const DelegateSpec& spec, const Rule& rule) {
    std::vector<uint16_t> detours = IoDetourIndices(rule);
    if (detours.empty()) {
      return absl::InvalidArgumentError("the rule has no IO detour to pick");
    }
    auto mode_arg = spec.Arg("mode", 0);
    std::string_view mode = mode_arg ? *mode_arg : "random";
    std::vector<uint64_t> weights;
    Mode m;
    if (mode == "random") {
      m = Mode::kRandom;
    } else if (mode == "first") {
      m = Mode::kFirst;
    } else if (mode == "weighted") {
      m = Mode::kWeighted;
      for (size_t i = 0; i < detours.size(); ++i) {
        auto w = spec.Arg("", static_cast<int>(i) + (spec.Arg("mode") ? 0 : 1));
        if (!w) {
          return absl::InvalidArgumentError(
              StrCat("weighted needs one weight per IO detour (",
                     detours.size(), "), e.g. pick(weighted, 3, 1)"));
        }
        uint64_t v = 0;
        auto [p, ec] = std::from_chars(w->data(), w->data() + w->size(), v);
        if (ec != std::errc() || p != w->data() + w->size() || v == 0) {
          return absl::InvalidArgumentError(
              StrCat("weight '", *w, "' is not a positive integer"));
        }
        weights.push_back(v);
      }
    } else {
      return absl::InvalidArgumentError(
          StrCat("unknown mode '", mode, "' (use random, first or weighted)"));
    }
    return std::make_unique<Pick>(m, std::move(detours), std::move(weights));
  }

  Decision OnRequest(const IoHeader&, DelegateContext&) override {
    Decision d;
    switch (mode_) {
      case Mode::kFirst:
        d.use.push_back(detours_[0]);
        break;
      case Mode::kRandom:
        d.use.push_back(detours_[FastRandom() % detours_.size()]);
        break;
      case Mode::kWeighted: {
        const uint64_t r = FastRandom() % cumulative_.back();
        size_t i = 0;
        while (r >= cumulative_[i]) ++i;
        d.use.push_back(detours_[i]);
        break;
      }
    }
    return d;
  }

 private:
  const Mode mode_;
  const std::vector<uint16_t> detours_;
  std::vector<uint64_t> cumulative_;
};

// notify(): emits the IO's header to the rule's F detours (or, without one,
// to the controller).
class Notify : public Delegate {
 public:
  Decision OnRequest(const IoHeader& h, DelegateContext&) override {
    Decision d;
    d.emit = ToString(h);
    return d;
  }
};

// track_writes(): endpoint routing with read-after-write consistency. When a
// write routed by this rule succeeds on range R of file X, reads of R (from
// the rule's source) follow it: the delegate keeps one read rule
//   <SOURCE, r, X[a:b]> -> <IO, TARGET>...
// per tracked range, just ahead of its own rule. A later write that overlaps
// tracked ranges splits them (the overlapped part follows the new write),
// and adjacent ranges with the same targets merge, so sequential writes keep
// one rule. State is shared by every track_writes rule of the sSwitch, so a
// rule that moves writes back (reclaim) takes over the ranges.
//
// A write home retires the tracked ranges it covers instead: reads of
// those bytes take the route they took before any tracking (the rules
// below), and no rule is kept for them; once every range is home, no read
// rule is left. A write is home when its target is the file itself
// (`<*, w, X> -> track_writes(); <IO, X>`) or when the rule says so:
// `@2 <*, w, X> -> track_writes(home); <IO, //S1/x>`, written above a
// rule that sends X to //S1/x, brings the writes an off-load sent
// elsewhere back to //S1/x (the tail-latency app's reclaim).
//
// `track_writes(spread)` sends each write to ONE of the rule's IO targets
// instead of all of them (Everest's write off-loading to several stores):
// the one its 1 MiB chunk of the file hashes to, so a burst bigger than one
// server spreads evenly, rewrites of a chunk land where the chunk's earlier
// writes did, and a sequential run stays on one target per chunk (one read
// rule). Reads follow each range to the target that holds it.
//
// Each write carries the read rule it makes as a record (DurableRules), and
// Restore rebuilds the ranges from those records after a restart.
class TrackWrites : public Delegate {
 public:
  struct Tracked {
    uint64_t end;
    std::vector<std::string> targets;
    uint64_t rule_id;  // 0: no rule installed for it (yet)
  };
  // Ranges of one (source, file), sorted by start, disjoint.
  using Ranges = std::map<uint64_t, Tracked>;
  struct State {
    // Guards files. Order: before SSwitch::control_mu_ (OnResponse and
    // Restore update the rule table with it held).
    Mutex mu;
    // Key: source pattern + '\n' + file.
    // Node-based: Restore keeps pointers to entries while it adds others.
    absl::node_hash_map<std::string, Ranges> files ABSL_GUARDED_BY(mu);
  };

  static absl::StatusOr<std::unique_ptr<Delegate>> Create(
      const DelegateSpec& spec, const Rule& rule) {
    bool home = false, spread = false;
    if (spec.args.size() == 1 && spec.args[0].key.empty() &&
        spec.args[0].value == "home") {
      home = true;
    } else if (spec.args.size() == 1 && spec.args[0].key.empty() &&
               spec.args[0].value == "spread") {
      spread = true;
    } else if (!spec.args.empty()) {
      return absl::InvalidArgumentError(
          "takes no argument, or one of 'home' (the writes it routes go "
          "home) and 'spread' (each write goes to one of its targets)");
    }
    if (!(rule.pattern.ops & kOpClassWrite)) {
      return absl::InvalidArgumentError(
          "the rule must match writes (op 'w') to track them");
    }
    for (const Detour& d : rule.detours) {
      if (d.what == Detour::What::kIo && d.target.kind != Target::Kind::kFile) {
        return absl::InvalidArgumentError(
            "writes can only be tracked to file targets");
      }
    }
    std::vector<uint16_t> spread_over;
    if (spread) spread_over = IoDetourIndices(rule);
    return std::make_unique<TrackWrites>(rule.pattern.source, home,
                                         std::move(spread_over));
  }

  TrackWrites(SourcePattern source, bool home, std::vector<uint16_t> spread)
      : source_(std::move(source)), home_(home), spread_(std::move(spread)) {}

  Decision OnRequest(const IoHeader& h, DelegateContext&) override {
    Decision d;
    if (spread_.size() > 1 && h.op == Op::kWrite) {
      constexpr int kChunkShift = 20;
      const size_t slot =
          (std::hash<std::string_view>()(h.file) + (h.offset >> kChunkShift)) %
          spread_.size();
      d.use.push_back(spread_[slot]);
    }
    return d;
  }
  bool wants_response() const override { return true; }

  // The read rule a write makes: reads of its range follow it. The rule
  // names the whole run of tracked bytes around the write that follow the
  // same targets (as the read rules will once the write succeeds), so that
  // the server storing it drops the records of the run's earlier writes:
  // sequential or overlapping writes leave one record per run, not one
  // per write. Bytes tracked elsewhere are not claimed; writes in flight
  // at once claim only what had completed, which stays true (the update
  // protocol drains a rule's writes before its targets change).
  bool makes_durable_rules() const override { return true; }
  std::vector<Rule> DurableRules(const IoHeader& h,
                                 const std::vector<std::string>& targets,
                                 DelegateContext& ctx) const override {
    if (h.op != Op::kWrite || h.length == 0) return {};
    uint64_t a = h.offset, b = h.end();
    const bool home = IsHome(h.file, targets);
    auto state = StateOf(ctx);
    {
      MutexLock l(&state->mu);
      auto f = state->files.find(KeyOf(h.file));
      if (home) {
        // A write home needs a record only to outdate tracked ranges (whose
        // records may be on other servers); its own bytes make no run.
        if (f == state->files.end() || !Overlaps(f->second, a, b)) return {};
      } else if (f != state->files.end()) {
        const Ranges& ranges = f->second;
        // The run that reaches `a` from the left and the one that reaches
        // `b` from the right, if they follow the same targets.
        auto it = ranges.upper_bound(a);
        if (it != ranges.begin()) {
          auto left = std::prev(it);
          if (left->second.end >= a && left->second.targets == targets) {
            a = left->first;
          }
        }
        auto right = ranges.upper_bound(b);
        if (right != ranges.begin()) {
          --right;
          if (right->second.end > b && right->second.targets == targets) {
            b = right->second.end;
          }
        }
      }
    }
    std::vector<Rule> out;
    out.push_back(ReadRule(source_, h.file, a, b, targets));
    return out;
  }

  // A rename carries the ranges of `from` over to `to`, their targets
  // moved along; `to`'s own ranges (the file it replaces) go.
  std::vector<Rule> RenameRules(const std::string& from, const std::string& to,
                                const Moves& moved,
                                DelegateContext& ctx) const override {
    auto state = StateOf(ctx);
    MutexLock l(&state->mu);
    std::vector<Rule> out;
    if (from == to) return out;
    static const Ranges kNone;
    auto f = state->files.find(KeyOf(from));
    auto t = to.empty() ? state->files.end() : state->files.find(KeyOf(to));
    for (const auto& [start, r] : t == state->files.end() ? kNone : t->second) {
      out.push_back(ReadRule(source_, to, start, r.end, {to}));  // retired
    }
    for (const auto& [start, r] : f == state->files.end() ? kNone : f->second) {
      out.push_back(ReadRule(source_, from, start, r.end, {from}));
      if (to.empty()) continue;
      out.push_back(
          ReadRule(source_, to, start, r.end, MovedTargets(r.targets, moved)));
    }
    return out;
  }

  void Renamed(const std::string& from, const std::string& to,
               const Moves& moved, DelegateContext& ctx) override {
    if (from == to) return;
    auto state = StateOf(ctx);
    MutexLock l(&state->mu);
    Ranges taken;
    if (auto f = state->files.find(KeyOf(from)); f != state->files.end()) {
      taken = std::move(f->second);
      state->files.erase(f);
    }
    std::vector<uint64_t> remove;
    for (const auto& [start, r] : taken) {
      if (r.rule_id != 0) remove.push_back(r.rule_id);
    }
    if (to.empty()) {  // the name is gone
      if (!remove.empty()) {
        if (auto ids = ctx.Update({}, remove); !ids.ok()) {
          LogError("track_writes: removing the read rules of ", from, ": ",
                   ids.status().message());
        }
      }
      return;
    }
    Ranges& into = state->files[KeyOf(to)];
    for (const auto& [start, r] : into) {
      if (r.rule_id != 0) remove.push_back(r.rule_id);
    }
    into.clear();
    std::vector<Rule> insert;
    for (auto& [start, r] : taken) {
      r.targets = MovedTargets(r.targets, moved);
      r.rule_id = 0;
      insert.push_back(ReadRule(source_, to, start, r.end, r.targets));
    }
    into = std::move(taken);
    if (into.empty()) state->files.erase(KeyOf(to));
    if (insert.empty() && remove.empty()) return;
    auto ids = ctx.Update(std::move(insert), remove);
    if (!ids.ok()) {
      // The rules stay as they were (reads of `to` then miss its bytes
      // until a restart restores them from the records): say so loudly.
      LogError("track_writes: moving the read rules of ", from, " to ", to,
               ": ", ids.status().message());
      return;
    }
    if (ids->empty()) return;
    size_t i = 0;
    for (auto& [start, r] : state->files[KeyOf(to)]) r.rule_id = (*ids)[i++];
  }

  void OnResponse(const IoHeader& h, const IoOutcome& out,
                  DelegateContext& ctx) override {
    if (h.op != Op::kWrite || !out.status.ok() || out.bytes == 0) return;
    auto state = StateOf(ctx);
    const std::string key = KeyOf(h.file);
    MutexLock l(&state->mu);
    Ranges& ranges = state->files[key];
    std::vector<std::pair<uint64_t, Tracked>> erased;
    std::vector<uint64_t> fresh;
    if (IsHome(h.file, out.targets)) {
      if (!Overlaps(ranges, h.offset, h.offset + out.bytes)) return;
      Retire(ranges, h.offset, h.offset + out.bytes, &erased, &fresh);
    } else {
      Assign(ranges, h.offset, h.offset + out.bytes, out.targets, &erased,
             &fresh);
    }
    // Failed, the read rules stay as they were: reads of the range keep
    // their old route; the write itself has succeeded.
    (void)Install(h.file, ranges, std::move(erased), fresh, ctx);
  }

  absl::Status ForgetRange(const std::string& file, uint64_t start,
                           uint64_t end, DelegateContext& ctx) override {
    auto state = StateOf(ctx);
    MutexLock l(&state->mu);
    auto f = state->files.find(KeyOf(file));
    if (f == state->files.end() || !Overlaps(f->second, start, end)) {
      return absl::OkStatus();
    }
    std::vector<std::pair<uint64_t, Tracked>> erased;
    std::vector<uint64_t> fresh;
    Retire(f->second, start, end, &erased, &fresh);
    return Install(file, f->second, std::move(erased), fresh, ctx);
  }

  absl::Status Restore(const std::vector<Rule>& made,
                       DelegateContext& ctx) override {
    // Replay every write's range in order, then install the outcome in one
    // update (rather than one per record: restoring 100 000 records must
    // take well under a second).
    absl::flat_hash_map<std::string, Ranges> replayed;
    for (const Rule& r : made) {
      const FilePattern& f = r.pattern.file;
      if (f.kind != FilePattern::Kind::kExact || !f.range ||
          r.pattern.ops != kOpClassRead) {
        return absl::InvalidArgumentError(
            StrCat("not a track_writes record: ", FormatRule(r)));
      }
      std::vector<std::string> targets;
      for (const Detour& d : r.detours) {
        if (d.what == Detour::What::kIo &&
            d.target.kind == Target::Kind::kFile) {
          targets.push_back(d.target.file);
        }
      }
      std::vector<std::pair<uint64_t, Tracked>> erased;
      std::vector<uint64_t> fresh;
      if (WentHome(ctx.rule(), f.text, targets)) {
        Retire(replayed[KeyOf(f.text)], f.range->start, f.range->end, &erased,
               &fresh);
      } else {
        Assign(replayed[KeyOf(f.text)], f.range->start, f.range->end, targets,
               &erased, &fresh);
      }
    }
    auto state = StateOf(ctx);
    MutexLock l(&state->mu);
    std::vector<uint64_t> remove;
    std::vector<Rule> insert;
    std::vector<std::pair<Ranges*, uint64_t>> slots;
    for (auto& [key, ranges] : replayed) {
      // What is tracked already for these files gives way to the records.
      Ranges& live = state->files[key];
      for (const auto& [start, t] : live) {
        if (t.rule_id != 0) remove.push_back(t.rule_id);
      }
      live.clear();
      const std::string file = key.substr(key.find('\n') + 1);
      for (auto& [start, t] : ranges) {
        insert.push_back(ReadRule(source_, file, start, t.end, t.targets));
        live[start] = Tracked{t.end, t.targets, 0};
        slots.emplace_back(&live, start);
      }
    }
    auto ids = ctx.Update(std::move(insert), remove);
    if (!ids.ok()) {
      for (auto& [ranges, start] : slots) ranges->erase(start);
      return ids.status();
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      slots[i].first->at(slots[i].second).rule_id = (*ids)[i];
    }
    return absl::OkStatus();
  }

  // Puts the rule table in step with `ranges` after Assign or Retire: the
  // rules of `erased` go, the `fresh` ranges get theirs. On failure the
  // table did not change, and neither do `ranges`.
  // REQUIRES: the state's mu held.
  absl::Status Install(const std::string& file, Ranges& ranges,
                       std::vector<std::pair<uint64_t, Tracked>> erased,
                       const std::vector<uint64_t>& fresh,
                       DelegateContext& ctx) const {
    std::vector<uint64_t> remove;
    for (const auto& [start, t] : erased) {
      if (t.rule_id != 0) remove.push_back(t.rule_id);
    }
    std::vector<Rule> insert;
    for (uint64_t start : fresh) {
      const Tracked& t = ranges.at(start);
      insert.push_back(ReadRule(source_, file, start, t.end, t.targets));
    }
    auto ids = ctx.Update(std::move(insert), remove);
    if (!ids.ok()) {
      for (uint64_t start : fresh) ranges.erase(start);
      for (auto& [start, t] : erased) ranges.emplace(start, std::move(t));
      return ids.status();
    }
    for (size_t i = 0; i < fresh.size(); ++i) {
      ranges.at(fresh[i]).rule_id = (*ids)[i];
    }
    return absl::OkStatus();
  }

  static std::vector<std::string> MovedTargets(
      const std::vector<std::string>& targets, const Moves& moved) {
    std::vector<std::string> out;
    for (const std::string& t : targets) {
      auto m = std::find_if(moved.begin(), moved.end(),
                            [&](const auto& x) { return x.first == t; });
      out.push_back(m == moved.end() ? t : m->second);
    }
    return out;
  }

  static Rule ReadRule(const SourcePattern& source, const std::string& file,
                       uint64_t start, uint64_t end,
                       const std::vector<std::string>& targets) {
    Rule r;
    r.pattern.source = source;
    r.pattern.ops = kOpClassRead;
    r.pattern.file.kind = FilePattern::Kind::kExact;
    r.pattern.file.text = file;
    r.pattern.file.range = ByteRange{start, end};
    for (const std::string& t : targets) {
      Detour d;
      d.target.kind = Target::Kind::kFile;
      d.target.file = t;
      r.detours.push_back(std::move(d));
    }
    return r;
  }

  // Whether a write to `file` this rule sent to `targets` went home.
  bool IsHome(const std::string& file,
              const std::vector<std::string>& targets) const {
    return home_ || (targets.size() == 1 && targets[0] == file);
  }
  // Whether a record (of this rule or of another with the same pattern)
  // sent `file`'s bytes home: to the file itself, or, when this rule goes
  // home, where this rule sends them.
  bool WentHome(const Rule& own, const std::string& file,
                const std::vector<std::string>& targets) const {
    if (targets.size() == 1 && targets[0] == file) return true;
    if (!home_) return false;
    std::vector<std::string> mine;
    for (const Detour& d : own.detours) {
      if (d.what == Detour::What::kIo && d.target.kind == Target::Kind::kFile) {
        mine.push_back(ResolveTargetFile(d.target, own.pattern.file, file));
      }
    }
    return mine == targets;
  }
  static bool Overlaps(const Ranges& ranges, uint64_t a, uint64_t b) {
    auto it = ranges.upper_bound(a);
    if (it != ranges.begin() && std::prev(it)->second.end > a) return true;
    return it != ranges.end() && it->first < b;
  }
  // Makes [a, b) of `ranges` follow the file's own route: as Assign, but
  // the range itself is not tracked (no rule).
  static void Retire(Ranges& ranges, uint64_t a, uint64_t b,
                     std::vector<std::pair<uint64_t, Tracked>>* erased,
                     std::vector<uint64_t>* fresh) {
    static const std::vector<std::string> kNone;
    Assign(ranges, a, b, kNone, erased, fresh);
    // Assign merged nothing into it (no tracked range has no targets).
    ranges.erase(a);
    std::erase(*fresh, a);
  }

  // Makes [a, b) of `ranges` follow `targets`: ranges it overlaps are cut
  // (their parts outside stay), and neighbours with the same targets merge
  // into it. Entries taken out go to `erased`; starts of entries that need a
  // (new) rule go to `fresh`.
  static void Assign(Ranges& ranges, uint64_t a, uint64_t b,
                     const std::vector<std::string>& targets,
                     std::vector<std::pair<uint64_t, Tracked>>* erased,
                     std::vector<uint64_t>* fresh) {
    struct Piece {
      uint64_t start, end;
      std::vector<std::string> targets;
    };
    std::vector<Piece> remnants;
    auto it = ranges.upper_bound(a);
    if (it != ranges.begin()) --it;
    while (it != ranges.end() && it->first < b) {
      const uint64_t s = it->first, e = it->second.end;
      if (e <= a) {
        ++it;
        continue;
      }
      if (s < a) remnants.push_back({s, a, it->second.targets});
      if (e > b) remnants.push_back({b, e, it->second.targets});
      erased->emplace_back(it->first, std::move(it->second));
      it = ranges.erase(it);
    }
    for (Piece& p : remnants) {
      if (p.targets == targets) {
        a = std::min(a, p.start);
        b = std::max(b, p.end);
      } else {
        ranges[p.start] = Tracked{p.end, std::move(p.targets), 0};
        fresh->push_back(p.start);
      }
    }
    auto take = [&](Ranges::iterator n) {
      if (n->second.rule_id != 0) {
        erased->emplace_back(n->first, std::move(n->second));
      } else {
        std::erase(*fresh, n->first);
      }
      ranges.erase(n);
    };
    auto left = ranges.lower_bound(a);
    if (left != ranges.begin()) {
      --left;
      if (left->second.end == a && left->second.targets == targets) {
        a = left->first;
        take(left);
      }
    }
    auto right = ranges.find(b);
    if (right != ranges.end() && right->second.targets == targets) {
      b = right->second.end;
      take(right);
    }
    ranges[a] = Tracked{b, targets, 0};
    fresh->push_back(a);
  }

 private:
  static std::shared_ptr<State> StateOf(DelegateContext& ctx) {
    return std::static_pointer_cast<State>(ctx.SharedState(
        "track_writes", [] { return std::make_shared<State>(); }));
  }
  std::string KeyOf(const std::string& file) const {
    return StrCat(static_cast<int>(source_.kind), source_.name, "\n", file);
  }

  const SourcePattern source_;
  const bool home_;
  // With `spread`: the rule's IO detours, a write goes to one of them.
  const std::vector<uint16_t> spread_;
};

// trace(P) or trace(sample=P): samples a share P (in [0, 1]; default 1,
// every IO) of the rule's IOs for tracing: they carry a Trace along their
// path (sswitch/trace.h).
class TraceSampler : public Delegate {
 public:
  explicit TraceSampler(double share)
      : threshold_(share >= 1.0 ? UINT64_MAX
                                : static_cast<uint64_t>(
                                      share * 18446744073709551616.0)) {}

  static absl::StatusOr<std::unique_ptr<Delegate>> Create(
      const DelegateSpec& spec, const Rule&) {
    auto arg = spec.Arg("sample", 0);
    double share = 1.0;
    if (arg) {
      const std::string text(*arg);
      char* end = nullptr;
      share = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !(share >= 0) ||
          share > 1) {
        return absl::InvalidArgumentError(
            StrCat("sample '", *arg, "' is not a share in [0, 1] (e.g. 0.01)"));
      }
    }
    return std::make_unique<TraceSampler>(share);
  }

  Decision OnRequest(const IoHeader&, DelegateContext&) override {
    Decision d;
    d.trace = threshold_ != 0 &&
              (threshold_ == UINT64_MAX || FastRandom() < threshold_);
    return d;
  }

 private:
  const uint64_t threshold_;  // sampled when a random u64 is below it
};

}  // namespace

void RegisterBuiltinDelegates(DelegateRegistry& registry) {
  (void)registry.Register("pick", &Pick::Create);
  (void)registry.Register(
      "notify",
      [](const DelegateSpec& spec,
         const Rule&) -> absl::StatusOr<std::unique_ptr<Delegate>> {
        if (!spec.args.empty()) {
          return absl::InvalidArgumentError("takes no arguments");
        }
        return std::make_unique<Notify>();
      });
  (void)registry.Register("track_writes", &TrackWrites::Create);
  (void)registry.Register("trace", &TraceSampler::Create);
}

}  // namespace sroute

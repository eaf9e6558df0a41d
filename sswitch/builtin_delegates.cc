// The built-in delegates: pick, notify and track_writes.
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "rules/parser.h"
#include "sswitch/delegate.h"
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
class TrackWrites : public Delegate {
 public:
  struct Tracked {
    uint64_t end;
    std::vector<std::string> targets;
    uint64_t rule_id;
  };
  struct State {
    std::mutex mu;
    // Key: source pattern + '\n' + file. Ranges sorted by start, disjoint.
    absl::flat_hash_map<std::string, std::map<uint64_t, Tracked>> files;
  };

  static absl::StatusOr<std::unique_ptr<Delegate>> Create(
      const DelegateSpec& spec, const Rule& rule) {
    if (!spec.args.empty()) {
      return absl::InvalidArgumentError("takes no arguments");
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
    return std::make_unique<TrackWrites>(rule.pattern.source);
  }

  explicit TrackWrites(SourcePattern source) : source_(std::move(source)) {}

  Decision OnRequest(const IoHeader&, DelegateContext&) override { return {}; }
  bool wants_response() const override { return true; }

  // The read rule a write makes: reads of its range follow it. (Merging
  // with neighbours is left to whoever replays the records, in their
  // order.)
  bool makes_durable_rules() const override { return true; }
  std::vector<Rule> DurableRules(
      const IoHeader& h,
      const std::vector<std::string>& targets) const override {
    if (h.op != Op::kWrite || h.length == 0) return {};
    std::vector<Rule> out;
    out.push_back(ReadRule(source_, h.file, h.offset, h.end(), targets));
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

  void OnResponse(const IoHeader& h, const IoOutcome& out,
                  DelegateContext& ctx) override {
    if (h.op != Op::kWrite || !out.status.ok() || out.bytes == 0) return;
    auto state = std::static_pointer_cast<State>(ctx.SharedState(
        "track_writes", [] { return std::make_shared<State>(); }));
    const SourcePattern& source = ctx.rule().pattern.source;
    const std::string key =
        StrCat(static_cast<int>(source.kind), source.name, "\n", h.file);
    uint64_t a = h.offset, b = h.offset + out.bytes;

    std::lock_guard<std::mutex> l(state->mu);
    std::map<uint64_t, Tracked>& ranges = state->files[key];
    std::vector<uint64_t> remove;
    struct Piece {
      uint64_t start, end;
      std::vector<std::string> targets;
    };
    std::vector<Piece> add;
    // What we take out of `ranges`, to put back if the update fails.
    std::vector<std::pair<uint64_t, Tracked>> erased;
    // Overlapping ranges: keep the parts outside [a, b).
    auto it = ranges.upper_bound(a);
    if (it != ranges.begin()) --it;
    while (it != ranges.end() && it->first < b) {
      const uint64_t s = it->first, e = it->second.end;
      if (e <= a) {
        ++it;
        continue;
      }
      remove.push_back(it->second.rule_id);
      if (s < a) add.push_back({s, a, it->second.targets});
      if (e > b) add.push_back({b, e, it->second.targets});
      erased.emplace_back(it->first, std::move(it->second));
      it = ranges.erase(it);
    }
    // Merge with neighbours (including remnants) that have the same targets.
    std::vector<Piece> kept;
    for (Piece& p : add) {
      if (p.targets == out.targets && (p.end == a || p.start == b)) {
        a = std::min(a, p.start);
        b = std::max(b, p.end);
      } else {
        kept.push_back(std::move(p));
      }
    }
    auto left = ranges.lower_bound(a);
    if (left != ranges.begin()) {
      --left;
      if (left->second.end == a && left->second.targets == out.targets) {
        a = left->first;
        remove.push_back(left->second.rule_id);
        erased.emplace_back(left->first, std::move(left->second));
        ranges.erase(left);
      }
    }
    auto right = ranges.find(b);
    if (right != ranges.end() && right->second.targets == out.targets) {
      b = right->second.end;
      remove.push_back(right->second.rule_id);
      erased.emplace_back(right->first, std::move(right->second));
      ranges.erase(right);
    }
    kept.push_back({a, b, out.targets});

    std::vector<Rule> insert;
    for (const Piece& p : kept) {
      insert.push_back(ReadRule(source, h.file, p.start, p.end, p.targets));
    }
    auto ids = ctx.Update(std::move(insert), remove);
    if (!ids.ok()) {
      // The table did not change: neither does the state. Reads of [a, b)
      // keep their old route; the write itself has succeeded.
      for (auto& [start, t] : erased) ranges.emplace(start, std::move(t));
      return;
    }
    for (size_t i = 0; i < kept.size(); ++i) {
      ranges[kept[i].start] =
          Tracked{kept[i].end, std::move(kept[i].targets), (*ids)[i]};
    }
  }

 private:
  const SourcePattern source_;
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
}

}  // namespace sroute

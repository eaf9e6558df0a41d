// SPDX-License-Identifier: Apache-2.0
#include "rules/rule_table.h"

#include <algorithm>
#include <cmath>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "re2/re2.h"
#include "re2/set.h"
#include "rules/pattern_matcher.h"
#include "util/strings.h"

namespace sroute {
namespace {

struct RangedEntry {
  uint64_t start;
  uint64_t end;
  const RuleEntry* entry;
};

// Whether `e` matches `h` taken as an IO of class `cls` (buckets already
// matched the file).
bool Passes(const RuleEntry* e, const IoHeader& h, OpClass cls) {
  const HeaderPattern& p = e->rule().pattern;
  return (p.ops & cls) != 0 && p.source.Matches(h);
}
bool Passes(const RuleEntry* e, const IoHeader& h) {
  return Passes(e, h, h.op_class());
}

int SlashDepth(std::string_view dir) {
  return static_cast<int>(std::count(dir.begin(), dir.end(), '/'));
}

}  // namespace

// All rules of one bucket match the same files (up to source and ops).
struct Bucket {
  std::vector<const RuleEntry*> whole;  // no byte range, precedence order
  std::vector<RangedEntry> ranged;      // sorted by start
  std::vector<uint64_t> max_end;        // max_end[i] = max end of ranged[0..i]

  void Add(const RuleEntry* e) {
    const auto& range = e->rule().pattern.file.range;
    if (range) {
      ranged.push_back({range->start, range->end, e});
    } else {
      whole.push_back(e);
    }
  }
  void Finish() {
    // Entries arrive in precedence order, so `whole` is sorted already.
    std::stable_sort(ranged.begin(), ranged.end(),
                     [](const RangedEntry& a, const RangedEntry& b) {
                       return a.start < b.start;
                     });
    max_end.resize(ranged.size());
    uint64_t m = 0;
    for (size_t i = 0; i < ranged.size(); ++i) {
      m = std::max(m, ranged[i].end);
      max_end[i] = m;
    }
  }
};

class RuleIndex {
 public:
  explicit RuleIndex(std::vector<RuleEntryPtr> rules)
      : entries_(std::move(rules)) {
    std::sort(entries_.begin(), entries_.end(),
              [](const RuleEntryPtr& a, const RuleEntryPtr& b) {
                return a->order() < b->order();
              });
    by_id_.reserve(entries_.size());
    std::vector<std::string> regex_texts;
    absl::flat_hash_map<std::string, int> regex_slot;
    for (const RuleEntryPtr& ptr : entries_) {
      const RuleEntry* e = ptr.get();
      by_id_[e->id()] = e;
      if (e->rule().is_tap()) continue;  // RuleTable::taps_
      const FilePattern& f = e->rule().pattern.file;
      const SourcePattern& src = e->rule().pattern.source;
      switch (f.kind) {
        case FilePattern::Kind::kExact:
          exact_[f.text].Add(e);
          break;
        case FilePattern::Kind::kPrefix: {
          const size_t slash = f.text.rfind('/');
          std::string dir = f.text.substr(0, slash + 1);
          std::string partial = f.text.substr(slash + 1);
          prefix_depths_ |= uint64_t{1} << std::min(SlashDepth(dir), 63);
          auto& groups = prefix_[dir];
          auto it = std::find_if(
              groups.begin(), groups.end(),
              [&](const PrefixGroup& g) { return g.partial == partial; });
          if (it == groups.end()) {
            groups.push_back({partial, {}});
            it = groups.end() - 1;
          }
          it->bucket.Add(e);
          break;
        }
        case FilePattern::Kind::kRegex: {
          auto [it, inserted] = regex_slot.try_emplace(
              f.text, static_cast<int>(regex_texts.size()));
          if (inserted) {
            regex_texts.push_back(f.text);
            regex_buckets_.emplace_back();
          }
          regex_buckets_[it->second].Add(e);
          break;
        }
        case FilePattern::Kind::kAny:
          switch (src.kind) {
            case SourcePattern::Kind::kAny:
              any_any_.Add(e);
              break;
            case SourcePattern::Kind::kTenant:
              any_tenant_[src.name].Add(e);
              break;
            case SourcePattern::Kind::kStage:
              any_stage_[src.name].Add(e);
              break;
          }
          break;
      }
    }
    for (auto& [k, b] : exact_) b.Finish();
    for (auto& [k, groups] : prefix_) {
      for (auto& g : groups) g.bucket.Finish();
    }
    for (auto& b : regex_buckets_) b.Finish();
    any_any_.Finish();
    for (auto& [k, b] : any_tenant_) b.Finish();
    for (auto& [k, b] : any_stage_) b.Finish();
    if (!regex_texts.empty()) {
      RE2::Options opts;
      opts.set_log_errors(false);
      auto set = std::make_unique<RE2::Set>(opts, RE2::ANCHOR_BOTH);
      bool ok = true;
      for (size_t i = 0; ok && i < regex_texts.size(); ++i) {
        // Set indices must equal the bucket slots.
        ok = set->Add(regex_texts[i], nullptr) == static_cast<int>(i);
      }
      // A regex that does not parse (a Rule not from the parser), or a set
      // too large for RE2's memory budget although each regex compiled on
      // its own: match the regexes one by one instead (RegexList()).
      if (ok && set->Compile()) regexes_ = std::move(set);
      regex_texts_ = std::move(regex_texts);
    }
  }

  template <typename Fn>
  void ForEachBucket(const IoHeader& h, Fn&& fn) const {
    const std::string& file = h.file;
    if (!exact_.empty()) {
      auto it = exact_.find(file);
      if (it != exact_.end()) fn(it->second);
    }
    if (!prefix_.empty()) {
      int depth = 0;
      for (size_t p = 0; p < file.size(); ++p) {
        if (file[p] != '/') continue;
        ++depth;
        if (p < 2) continue;
        if (!(prefix_depths_ & (uint64_t{1} << std::min(depth, 63)))) continue;
        auto it = prefix_.find(std::string_view(file.data(), p + 1));
        if (it == prefix_.end()) continue;
        std::string_view rest(file.data() + p + 1, file.size() - p - 1);
        for (const PrefixGroup& g : it->second) {
          if (rest.starts_with(g.partial)) fn(g.bucket);
        }
      }
    }
    if (!regex_texts_.empty()) {
      thread_local std::vector<int> hits;
      hits.clear();
      RE2::Set::ErrorInfo error{RE2::Set::kNoError};
      if (regexes_ != nullptr && regexes_->Match(file, &hits, &error)) {
        for (int i : hits) fn(regex_buckets_[i]);
      } else if (regexes_ == nullptr || error.kind != RE2::Set::kNoError) {
        // No usable set, or its DFA ran out of memory: RE2 alone falls back
        // to the NFA and always answers.
        const std::vector<std::unique_ptr<RE2>>& list = RegexList();
        for (size_t i = 0; i < list.size(); ++i) {
          if (list[i]->ok() && RE2::FullMatch(file, *list[i])) {
            fn(regex_buckets_[i]);
          }
        }
      }
    }
    if (h.stage.empty()) {
      if (!any_any_.whole.empty() || !any_any_.ranged.empty()) fn(any_any_);
      if (!any_tenant_.empty()) {
        auto it = any_tenant_.find(h.source);
        if (it != any_tenant_.end()) fn(it->second);
      }
    } else if (!any_stage_.empty()) {
      auto it = any_stage_.find(h.stage);
      if (it != any_stage_.end()) fn(it->second);
    }
  }

  // Calls fn(e) for every rule not skipped by `removed` that could route a
  // tenant's IO to `file` (any tenant, op or byte range; stage-sourced
  // rules do not count) until fn returns false.
  template <typename Fn>
  void ForEachRuleOf(const std::string& file,
                     const absl::flat_hash_set<uint64_t>* removed,
                     Fn&& fn) const {
    auto live = [removed](const RuleEntry* e) {
      return e->rule().pattern.source.kind != SourcePattern::Kind::kStage &&
             (removed == nullptr || !removed->contains(e->id()));
    };
    bool go = true;
    auto visit = [&](const Bucket& b) {
      for (const RuleEntry* e : b.whole) {
        if (go && live(e)) go = fn(e);
      }
      for (const RangedEntry& r : b.ranged) {
        if (go && live(r.entry)) go = fn(r.entry);
      }
    };
    IoHeader h;
    h.file = file;
    ForEachBucket(h, [&](const Bucket& b) {
      if (go) visit(b);
    });
    for (const auto& [tenant, b] : any_tenant_) {
      if (!go) break;
      visit(b);
    }
  }

  const RuleEntry* Find(uint64_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : it->second;
  }
  const std::vector<RuleEntryPtr>& entries() const { return entries_; }

 private:
  struct PrefixGroup {
    std::string partial;
    Bucket bucket;
  };
  std::vector<RuleEntryPtr> entries_;  // precedence order; owns the rules
  absl::flat_hash_map<uint64_t, const RuleEntry*> by_id_;
  absl::flat_hash_map<std::string, Bucket, StringHash, StringEq> exact_;
  absl::flat_hash_map<std::string, std::vector<PrefixGroup>, StringHash,
                      StringEq>
      prefix_;
  uint64_t prefix_depths_ = 0;  // bit d: a prefix directory with d slashes
  // One RE2 per regex slot, built on first use when the set cannot answer.
  const std::vector<std::unique_ptr<RE2>>& RegexList() const {
    std::call_once(regex_list_once_, [this] {
      RE2::Options opts;
      opts.set_log_errors(false);
      for (const std::string& re : regex_texts_) {
        regex_list_.push_back(std::make_unique<RE2>(re, opts));
      }
    });
    return regex_list_;
  }

  std::unique_ptr<RE2::Set> regexes_;  // null when the set could not be built
  std::vector<std::string> regex_texts_;  // by slot
  mutable std::once_flag regex_list_once_;
  mutable std::vector<std::unique_ptr<RE2>> regex_list_;
  std::vector<Bucket> regex_buckets_;
  Bucket any_any_;
  absl::flat_hash_map<std::string, Bucket, StringHash, StringEq> any_tenant_;
  absl::flat_hash_map<std::string, Bucket, StringHash, StringEq> any_stage_;
};

RuleTable::RuleTable() = default;
RuleTable::~RuleTable() = default;

struct RuleTable::Tap {
  const RuleEntry* entry;
  PatternMatcher matcher;  // the tap's pattern, range included
};

std::shared_ptr<const std::vector<RuleTable::Tap>> RuleTable::MakeTaps(
    const std::vector<RuleTable::Tap>& kept,
    const absl::flat_hash_set<uint64_t>& remove,
    const std::vector<RuleEntryPtr>& add) {
  std::vector<RuleTable::Tap> taps;
  for (const RuleTable::Tap& t : kept) {
    if (!remove.contains(t.entry->id())) taps.push_back(t);
  }
  for (const RuleEntryPtr& e : add) {
    if (!e->rule().is_tap()) continue;
    // A bad regex was refused when the rule was parsed; a matcher that
    // still fails to build leaves the tap out (it samples nothing).
    auto matcher = PatternMatcher::Create(e->rule().pattern);
    if (!matcher.ok()) continue;
    taps.push_back(RuleTable::Tap{e.get(), *std::move(matcher)});
  }
  std::sort(taps.begin(), taps.end(),
            [](const RuleTable::Tap& a, const RuleTable::Tap& b) {
              return a.entry->order() < b.entry->order();
            });
  return std::make_shared<const std::vector<RuleTable::Tap>>(std::move(taps));
}

RuleTablePtr RuleTable::Empty() {
  static const RuleTablePtr kEmpty = Build({});
  return kEmpty;
}

RuleTablePtr RuleTable::Build(std::vector<RuleEntryPtr> rules,
                              uint64_t version) {
  auto t = std::make_shared<RuleTable>();
  t->size_ = rules.size();
  t->taps_ = MakeTaps({}, {}, rules);
  t->base_ = std::make_shared<RuleIndex>(std::move(rules));
  t->delta_ = std::make_shared<RuleIndex>(std::vector<RuleEntryPtr>{});
  t->removed_ = std::make_shared<absl::flat_hash_set<uint64_t>>();
  t->version_ = version;
  return t;
}

RuleTablePtr RuleTable::Apply(std::vector<RuleEntryPtr> add,
                              const std::vector<uint64_t>& remove,
                              uint64_t version) const {
  absl::flat_hash_set<uint64_t> remove_set(remove.begin(), remove.end());
  const bool taps_change =
      std::any_of(add.begin(), add.end(),
                  [](const RuleEntryPtr& e) { return e->rule().is_tap(); }) ||
      std::any_of(taps_->begin(), taps_->end(), [&](const Tap& t) {
        return remove_set.contains(t.entry->id());
      });
  auto taps = taps_change ? MakeTaps(*taps_, remove_set, add) : taps_;
  std::vector<RuleEntryPtr> delta;
  delta.reserve(delta_->entries().size() + add.size());
  for (const RuleEntryPtr& e : delta_->entries()) {
    if (!remove_set.contains(e->id())) delta.push_back(e);
  }
  auto removed = std::make_shared<absl::flat_hash_set<uint64_t>>(*removed_);
  for (uint64_t id : remove) {
    if (base_->Find(id) != nullptr) removed->insert(id);
  }
  for (RuleEntryPtr& e : add) delta.push_back(std::move(e));

  const size_t live = base_->entries().size() - removed->size() + delta.size();
  const size_t threshold = std::max<size_t>(
      64, static_cast<size_t>(2 * std::sqrt(static_cast<double>(live))));
  if (delta.size() + removed->size() > threshold) {
    std::vector<RuleEntryPtr> all;
    all.reserve(live);
    for (const RuleEntryPtr& e : base_->entries()) {
      if (!removed->contains(e->id())) all.push_back(e);
    }
    for (RuleEntryPtr& e : delta) all.push_back(std::move(e));
    return Build(std::move(all), version);
  }
  auto t = std::make_shared<RuleTable>();
  t->taps_ = std::move(taps);
  t->base_ = base_;
  t->delta_ = std::make_shared<RuleIndex>(std::move(delta));
  t->removed_ = std::move(removed);
  t->size_ = live;
  t->version_ = version;
  return t;
}

// A bucket a header falls into, with the deleted-ids set of its layer.
struct BucketRef {
  const Bucket* bucket;
  const absl::flat_hash_set<uint64_t>* removed;  // null: nothing removed
};
using BucketRefs = absl::InlinedVector<BucketRef, 8>;

namespace {

const RuleEntry* BestWhole(const BucketRefs& buckets, const IoHeader& h,
                           OpClass cls) {
  const RuleEntry* best = nullptr;
  for (const BucketRef& ref : buckets) {
    for (const RuleEntry* e : ref.bucket->whole) {
      if (best != nullptr && !(e->order() < best->order())) break;
      if (!Passes(e, h, cls)) continue;
      if (ref.removed != nullptr && ref.removed->contains(e->id())) continue;
      best = e;
      break;
    }
  }
  return best;
}

}  // namespace

void RuleTable::CollectBuckets(const IoHeader& h, BucketRefs* refs) const {
  const auto* removed = removed_->empty() ? nullptr : removed_.get();
  base_->ForEachBucket(h, [&](const Bucket& b) {
    refs->push_back({&b, removed});
  });
  if (!delta_->entries().empty()) {
    delta_->ForEachBucket(h, [&](const Bucket& b) {
      refs->push_back({&b, nullptr});
    });
  }
}

bool RuleTable::MayRoute(const std::string& file) const {
  if (size_ == 0) return false;
  bool found = false;
  auto stop = [&found](const RuleEntry*) {
    found = true;
    return false;
  };
  const auto* removed = removed_->empty() ? nullptr : removed_.get();
  base_->ForEachRuleOf(file, removed, stop);
  if (!found && !delta_->entries().empty()) {
    delta_->ForEachRuleOf(file, nullptr, stop);
  }
  return found;
}

std::vector<const RuleEntry*> RuleTable::RulesOfFile(
    const std::string& file) const {
  std::vector<const RuleEntry*> out;
  if (size_ == 0) return out;
  auto add = [&out](const RuleEntry* e) {
    out.push_back(e);
    return true;
  };
  const auto* removed = removed_->empty() ? nullptr : removed_.get();
  base_->ForEachRuleOf(file, removed, add);
  if (!delta_->entries().empty()) delta_->ForEachRuleOf(file, nullptr, add);
  std::sort(out.begin(), out.end(), [](const RuleEntry* x, const RuleEntry* y) {
    return x->order() < y->order();
  });
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

const RuleEntry* RuleTable::MatchWhole(const IoHeader& h) const {
  return MatchWholeAs(h, h.op);
}

const RuleEntry* RuleTable::MatchWholeAs(const IoHeader& h, Op op) const {
  BucketRefs buckets;
  CollectBuckets(h, &buckets);
  return BestWhole(buckets, h, ClassOf(op));
}

void RuleTable::Match(const IoHeader& h, Pieces* out) const {
  out->clear();
  BucketRefs buckets;
  CollectBuckets(h, &buckets);
  const RuleEntry* whole = BestWhole(buckets, h, h.op_class());
  const uint64_t a = h.offset;
  // [a, b) with b clamped so that an extent near 2^64 cannot wrap around.
  const uint64_t room = UINT64_MAX - a;
  const uint64_t b = a + std::max<uint64_t>(1, std::min(h.length, room));

  absl::InlinedVector<const RuleEntry*, 4> ranged;
  for (const BucketRef& ref : buckets) {
    const Bucket& bucket = *ref.bucket;
    if (bucket.ranged.empty()) continue;
    // Entries starting before b; walk back while some entry may reach past a.
    auto it = std::lower_bound(
        bucket.ranged.begin(), bucket.ranged.end(), b,
        [](const RangedEntry& r, uint64_t v) { return r.start < v; });
    for (size_t i = it - bucket.ranged.begin(); i-- > 0;) {
      if (bucket.max_end[i] <= a) break;
      const RangedEntry& r = bucket.ranged[i];
      if (r.end <= a) continue;
      if (whole != nullptr && !(r.entry->order() < whole->order())) continue;
      if (!Passes(r.entry, h)) continue;
      if (ref.removed != nullptr && ref.removed->contains(r.entry->id())) {
        continue;
      }
      ranged.push_back(r.entry);
    }
  }
  if (ranged.empty()) {
    out->push_back({h.offset, h.length, whole});
    return;
  }
  std::sort(ranged.begin(), ranged.end(),
            [](const RuleEntry* x, const RuleEntry* y) {
              return x->order() < y->order();
            });
  // Carve [a, b) in precedence order.
  absl::InlinedVector<std::pair<uint64_t, uint64_t>, 4> uncovered = {{a, b}};
  absl::InlinedVector<std::pair<uint64_t, uint64_t>, 4> next;
  for (const RuleEntry* e : ranged) {
    const ByteRange& r = *e->rule().pattern.file.range;
    next.clear();
    for (auto [x, y] : uncovered) {
      const uint64_t s = std::max(x, r.start);
      const uint64_t t = std::min(y, r.end);
      if (s >= t) {
        next.push_back({x, y});
        continue;
      }
      out->push_back({s, t - s, e});
      if (x < s) next.push_back({x, s});
      if (t < y) next.push_back({t, y});
    }
    uncovered.swap(next);
    if (uncovered.empty()) break;
  }
  for (auto [x, y] : uncovered) out->push_back({x, y - x, whole});
  std::sort(out->begin(), out->end(),
            [](const Piece& p, const Piece& q) { return p.offset < q.offset; });
  if (h.length == 0) {
    const RuleEntry* rule = (*out)[0].rule;
    out->clear();
    out->push_back({h.offset, 0, rule});
  }
}

void RuleTable::Route(const IoHeader& h, Pieces* out) const {
  if (size_ == 0) {  // the passthrough: no index to probe
    out->clear();
    out->push_back({h.offset, h.length, nullptr});
    return;
  }
  if (HasByteExtent(h.op)) {
    Match(h, out);
  } else {
    out->clear();
    out->push_back({h.offset, h.length, MatchWhole(h)});
  }
}

void RuleTable::MatchTaps(const IoHeader& h,
                          absl::InlinedVector<const RuleEntry*, 2>* out) const {
  // A tap's range selects IOs that touch it; whole-file ops touch all.
  for (const Tap& t : *taps_) {
    if (t.matcher.Matches(h)) out->push_back(t.entry);
  }
}

bool RuleTable::MayTap(std::string_view file) const {
  return std::any_of(taps_->begin(), taps_->end(),
                     [&](const Tap& t) { return t.matcher.MatchesFile(file); });
}

const RuleEntry* RuleTable::Find(uint64_t id) const {
  if (const RuleEntry* e = delta_->Find(id)) return e;
  if (removed_->contains(id)) return nullptr;
  return base_->Find(id);
}

std::vector<RuleEntryPtr> RuleTable::Rules() const {
  std::vector<RuleEntryPtr> all;
  all.reserve(size_);
  for (const RuleEntryPtr& e : base_->entries()) {
    if (!removed_->contains(e->id())) all.push_back(e);
  }
  for (const RuleEntryPtr& e : delta_->entries()) all.push_back(e);
  std::sort(all.begin(), all.end(),
            [](const RuleEntryPtr& x, const RuleEntryPtr& y) {
              return x->order() < y->order();
            });
  return all;
}

}  // namespace sroute

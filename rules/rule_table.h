// SPDX-License-Identifier: Apache-2.0
// RuleTable: an immutable, indexed snapshot of an sSwitch's rules.
//
// Lookups never scan every rule: exact files are hashed, prefixes are looked
// up per path component, regexes go through one RE2::Set, rules for every
// file are keyed by source, and byte-ranged rules of one file are kept sorted
// by start. The first match by OrderKey (priority desc, then insertion order)
// wins.
//
// Updates produce a new table (copy on write). To keep frequent small
// updates cheap (delegates insert a rule per write), a table is a large
// `base` index plus a small `delta` index and a set of rule ids deleted from
// the base; Apply() rebuilds only the delta until it grows past about
// sqrt(size) rules, then folds everything into a new base.
//
// Thread safety: a RuleTable is immutable and may be shared by any number of
// threads.
#ifndef SROUTE_RULES_RULE_TABLE_H_
#define SROUTE_RULES_RULE_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "rules/io_header.h"
#include "rules/rule.h"

namespace sroute {

// Precedence of a rule; a smaller key wins.
struct OrderKey {
  int32_t priority = 0;  // higher priority first
  uint64_t seq = 0;      // then the order rules were inserted in
  // Rules a delegate inserts go just ahead of the rule that owns the delegate:
  // they share its priority and seq, with anchored=true, ordered by `sub`.
  bool anchored = false;
  uint64_t sub = 0;

  bool operator<(const OrderKey& o) const {
    if (priority != o.priority) return priority > o.priority;
    if (seq != o.seq) return seq < o.seq;
    if (anchored != o.anchored) return anchored;
    return sub < o.sub;
  }
};

// An installed rule. The sSwitch derives from it to hang runtime state
// (counters, the delegate instance) on it.
class RuleEntry {
 public:
  RuleEntry(uint64_t id, OrderKey order, Rule rule, std::string owner)
      : id_(id),
        order_(order),
        rule_(std::move(rule)),
        owner_(std::move(owner)) {}
  virtual ~RuleEntry() = default;
  RuleEntry(const RuleEntry&) = delete;
  RuleEntry& operator=(const RuleEntry&) = delete;

  uint64_t id() const { return id_; }
  const OrderKey& order() const { return order_; }
  const Rule& rule() const { return rule_; }
  const std::string& owner() const { return owner_; }

 private:
  const uint64_t id_;
  const OrderKey order_;
  const Rule rule_;
  const std::string owner_;
};

using RuleEntryPtr = std::shared_ptr<const RuleEntry>;

class RuleIndex;
struct BucketRef;  // rule_table.cc

class RuleTable {
 public:
  // [offset, offset+length) of an IO routed by `rule` (nullptr: no rule
  // matches, the IO takes its default route).
  struct Piece {
    uint64_t offset = 0;
    uint64_t length = 0;
    const RuleEntry* rule = nullptr;
  };
  using Pieces = absl::InlinedVector<Piece, 2>;

  static std::shared_ptr<const RuleTable> Empty();
  // Builds a table holding exactly `rules` (in one base index).
  static std::shared_ptr<const RuleTable> Build(std::vector<RuleEntryPtr> rules,
                                                uint64_t version = 0);

  // A new table: this one, without the rules whose ids are in `remove` (ids
  // not present are ignored), plus `add`.
  std::shared_ptr<const RuleTable> Apply(std::vector<RuleEntryPtr> add,
                                         const std::vector<uint64_t>& remove,
                                         uint64_t version) const;

  // The first rule matching `h`, ignoring rules with byte ranges. For IOs
  // without a byte extent (metadata).
  const RuleEntry* MatchWhole(const IoHeader& h) const;
  // MatchWhole for `h` taken as an IO of `op` (say, the getattr that finds
  // a written file's home), without copying the header.
  const RuleEntry* MatchWholeAs(const IoHeader& h, Op op) const;

  // Splits [h.offset, h.end()) into pieces, each routed by its first matching
  // rule, in offset order. An IO of length 0 is one piece of length 0 routed
  // like the byte at its offset.
  void Match(const IoHeader& h, Pieces* out) const;

  // Routes `h` whatever its op: Match() for ops with a byte extent,
  // MatchWhole() as a single piece otherwise.
  void Route(const IoHeader& h, Pieces* out) const;

  // Whether some rule could route a tenant's IO to `file` ("//HOST/PATH"):
  // one matching the file for any tenant, op or byte range. False means the
  // file takes its default route whoever accesses it and however.
  bool MayRoute(const std::string& file) const;
  // Every rule MayRoute counts for `file`: whatever its source, op classes
  // and byte range, in precedence order.
  std::vector<const RuleEntry*> RulesOfFile(const std::string& file) const;

  // Taps (Rule::is_tap) are not matched by the calls above: they are kept
  // apart, and an sSwitch asks for them once per IO it admits first.
  bool has_taps() const { return !taps_->empty(); }
  // Whether some tap may take an IO to `file`, whatever its source and op.
  bool MayTap(std::string_view file) const;
  // The taps matching `h` (source, op class, file, and an overlap of the
  // tap's byte range with the IO's extent), in precedence order.
  void MatchTaps(const IoHeader& h,
                 absl::InlinedVector<const RuleEntry*, 2>* out) const;

  const RuleEntry* Find(uint64_t id) const;
  // Every rule (taps too), in precedence order.
  std::vector<RuleEntryPtr> Rules() const;
  size_t size() const { return size_; }
  uint64_t version() const { return version_; }

  RuleTable(const RuleTable&) = delete;
  RuleTable& operator=(const RuleTable&) = delete;
  ~RuleTable();
  RuleTable();  // use Empty()/Build()

 private:
  friend class RuleIndex;
  // Appends the index buckets `h` falls into.
  void CollectBuckets(const IoHeader& h,
                      absl::InlinedVector<BucketRef, 8>* out) const;
  std::shared_ptr<const RuleIndex> base_;
  std::shared_ptr<const RuleIndex> delta_;
  // Ids of base rules that are no longer in the table.
  std::shared_ptr<const absl::flat_hash_set<uint64_t>> removed_;
  // The taps, in precedence order (few: shared by tables until one changes).
  struct Tap;
  std::shared_ptr<const std::vector<Tap>> taps_;
  // `kept` (minus `remove`) and the taps among `add`, in precedence order.
  static std::shared_ptr<const std::vector<Tap>> MakeTaps(
      const std::vector<Tap>& kept, const absl::flat_hash_set<uint64_t>& remove,
      const std::vector<RuleEntryPtr>& add);
  size_t size_ = 0;
  uint64_t version_ = 0;
};

using RuleTablePtr = std::shared_ptr<const RuleTable>;

}  // namespace sroute

#endif  // SROUTE_RULES_RULE_TABLE_H_

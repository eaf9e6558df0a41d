// SPDX-License-Identifier: Apache-2.0
// The sSwitch's control API: rules made into entries and installed
// (Update, Insert, Delete, Validate, delegate records restored), leases,
// Quiesce, Release and Drain (sswitch.h).
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "re2/re2.h"
#include "rules/parser.h"
#include "sswitch/inflight.h"
#include "sswitch/rule_context.h"
#include "sswitch/snapshot.h"
#include "sswitch/sswitch.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/interned.h"
#include "util/log.h"
#include "util/strings.h"
#include "util/thread_shard.h"

namespace sroute {

absl::StatusOr<std::shared_ptr<const RuleEntry>> SSwitch::MakeEntry(
    Rule rule, std::string owner, const OrderKey& order, const Snapshot& snap) {
  for (const Detour& d : rule.detours) {
    const Target& t = d.target;
    if (d.what != Detour::What::kIo && t.kind != Target::Kind::kController) {
      return absl::InvalidArgumentError(
          "IOHeader and F detours can only go to the controller");
    }
    if (t.kind == Target::Kind::kFile) {
      FileName name;
      if (!SplitFileName(t.file, &name)) {
        return absl::InvalidArgumentError(StrCat("bad target file ", t.file));
      }
      if (!snap.endpoints->contains(name.host)) {
        return absl::NotFoundError(
            StrCat("unknown endpoint '", name.host, "' in target ", t.file));
      }
    } else if (t.kind == Target::Kind::kStage &&
               (t.stage_host.empty() || t.stage_host == name_) &&
               !snap.stages->contains(t.stage)) {
      return absl::NotFoundError(
          StrCat("unknown stage '", t.stage, "' in target ", FormatTarget(t)));
    } else if (t.kind == Target::Kind::kStage && !t.stage_host.empty() &&
               t.stage_host != name_ &&
               !snap.endpoints->contains(t.stage_host)) {
      return absl::NotFoundError(StrCat("unknown endpoint '", t.stage_host,
                                        "' in target ", FormatTarget(t),
                                        " (a storage server of this host)"));
    }
  }
  if (rule.pattern.file.kind == FilePattern::Kind::kRegex) {
    RE2 re(rule.pattern.file.text, RE2::Quiet);
    if (!re.ok()) {
      return absl::InvalidArgumentError(
          StrCat("bad regular expression: ", re.error()));
    }
  }
  std::unique_ptr<Delegate> delegate;
  if (rule.delegate) {
    auto d = DelegateRegistry::Global().Create(*rule.delegate, rule);
    if (!d.ok()) return d.status();
    delegate = std::move(*d);
  }
  auto entry = std::make_shared<InstalledRule>(
      next_id_++, order, std::move(rule), std::move(owner));
  entry->delegate_response = delegate && delegate->wants_response();
  entry->delegate_durable = delegate && delegate->makes_durable_rules();
  entry->delegate = std::move(delegate);
  return entry;
}

absl::StatusOr<std::vector<uint64_t>> SSwitch::UpdateLocked(
    std::vector<Rule> insert, const std::vector<uint64_t>& remove,
    const std::vector<std::string>& owners, const RuleEntry* anchor) {
  if (owners.size() != 1 && owners.size() != insert.size()) {
    return absl::InvalidArgumentError("one owner, or one per rule");
  }
  const Snapshot& cur = *CurrentLocked();
  std::vector<uint64_t> present;
  present.reserve(remove.size());
  for (uint64_t id : remove) {
    if (cur.table->Find(id) != nullptr) {
      present.push_back(id);
    } else if (anchor == nullptr) {
      // A delegate's view may be stale (someone deleted its rule); a
      // user's delete of an unknown id is an error.
      return absl::NotFoundError(StrCat("no rule with id ", id));
    }
  }
  std::vector<RuleEntryPtr> entries;
  std::vector<uint64_t> ids;
  entries.reserve(insert.size());
  const uint64_t saved_id = next_id_, saved_seq = next_seq_,
                 saved_sub = next_sub_;
  for (size_t i = 0; i < insert.size(); ++i) {
    Rule& rule = insert[i];
    const std::string& owner = owners.size() == 1 ? owners[0] : owners[i];
    OrderKey order;
    if (anchor != nullptr) {
      order = anchor->order();
      order.anchored = true;
      order.sub = next_sub_++;
    } else {
      order.priority = rule.priority;
      order.seq = next_seq_++;
    }
    auto entry = MakeEntry(std::move(rule), owner, order, cur);
    if (!entry.ok()) {
      next_id_ = saved_id, next_seq_ = saved_seq, next_sub_ = saved_sub;
      return entry.status();
    }
    ids.push_back((*entry)->id());
    entries.push_back(std::move(*entry));
  }
  std::vector<HeaderPattern> changed;
  if (route_observer_) {
    for (const RuleEntryPtr& e : entries) changed.push_back(e->rule().pattern);
    for (uint64_t id : present) {
      changed.push_back(cur.table->Find(id)->rule().pattern);
    }
  }
  auto snap = std::make_shared<Snapshot>(cur);
  snap->version = cur.version + 1;
  snap->table = cur.table->Apply(std::move(entries), present, snap->version);
  Publish(std::move(snap));
  if (route_observer_ && !changed.empty()) route_observer_(changed);
  return ids;
}

absl::Status SSwitch::Validate(const std::vector<Rule>& rules) {
  MutexLock l(&control_mu_);
  const uint64_t saved_id = next_id_;
  absl::Status status;
  for (size_t i = 0; i < rules.size() && status.ok(); ++i) {
    auto entry = MakeEntry(rules[i], "", OrderKey(), *CurrentLocked());
    if (!entry.ok()) {
      status = absl::Status(
          entry.status().code(),
          StrCat(FormatRule(rules[i]), ": ", entry.status().message()));
    }
  }
  next_id_ = saved_id;  // nothing was installed
  return status;
}

absl::Status SSwitch::RestoreDelegateRules(
    std::vector<DelegateRuleRecord> records, size_t* skipped) {
  std::stable_sort(records.begin(), records.end(),
                   [](const DelegateRuleRecord& a,
                      const DelegateRuleRecord& b) { return a.seq < b.seq; });
  // Group by anchor, keeping the order within each group.
  std::vector<std::pair<std::string, std::vector<Rule>>> groups;
  size_t dropped = 0;
  for (const DelegateRuleRecord& rec : records) {
    auto rule = ParseRule(rec.rule);
    if (!rule.ok()) {
      ++dropped;
      continue;
    }
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& x) { return x.first == rec.anchor; });
    if (g == groups.end()) {
      groups.emplace_back(rec.anchor, std::vector<Rule>());
      g = groups.end() - 1;
    }
    g->second.push_back(*std::move(rule));
  }
  absl::Status first_error;
  auto snap = Load();
  for (auto& [anchor, rules] : groups) {
    const InstalledRule* owner = nullptr;
    for (const RuleEntryPtr& e : snap->table->Rules()) {
      const InstalledRule* r = AsInstalled(e.get());
      if (r->delegate_durable && FormatPattern(r->rule().pattern) == anchor) {
        owner = r;
        break;
      }
    }
    if (owner == nullptr) {
      dropped += rules.size();
      continue;
    }
    Context ctx(this, owner);
    absl::Status s = owner->delegate->Restore(rules, ctx);
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  if (skipped != nullptr) *skipped = dropped;
  return first_error;
}

absl::StatusOr<uint64_t> SSwitch::Insert(Rule rule, std::string owner) {
  std::vector<Rule> one;
  one.push_back(std::move(rule));
  auto ids = Update(std::move(one), {}, std::move(owner));
  if (!ids.ok()) return ids.status();
  return (*ids)[0];
}

absl::StatusOr<std::vector<uint64_t>> SSwitch::Update(
    std::vector<Rule> insert, const std::vector<uint64_t>& remove,
    std::string owner) {
  return Update(std::move(insert), std::vector<std::string>{owner}, remove);
}

absl::StatusOr<std::vector<uint64_t>> SSwitch::Update(
    std::vector<Rule> insert, const std::vector<std::string>& owners,
    const std::vector<uint64_t>& remove) {
  if (insert.empty() || !HasBypassGuard()) {
    MutexLock l(&control_mu_);
    return UpdateLocked(std::move(insert), remove, owners, nullptr);
  }
  absl::StatusOr<std::vector<uint64_t>> ids;
  absl::Status clear = ClearOfBypass(NamedByRules(insert), [&] {
    MutexLock l(&control_mu_);
    ids = UpdateLocked(std::move(insert), remove, owners, nullptr);
  });
  if (!clear.ok()) return clear;
  return ids;
}

void SSwitch::Resume(Io* io, const std::string& from) {
  SetStageOf(io, from);
  ++io->stage_hops_;
  Dispatch(io);
}

absl::Status SSwitch::Delete(uint64_t id) { return Update({}, {id}).status(); }

absl::StatusOr<int> SSwitch::Delete(const HeaderPattern& pattern) {
  MutexLock l(&control_mu_);
  std::vector<uint64_t> ids;
  for (const RuleEntryPtr& e : CurrentLocked()->table->Rules()) {
    if (e->rule().pattern == pattern) ids.push_back(e->id());
  }
  if (ids.empty()) return 0;
  auto r = UpdateLocked({}, ids, {""}, nullptr);
  if (!r.ok()) return r.status();
  return static_cast<int>(ids.size());
}

absl::StatusOr<int> SSwitch::DeleteOwned(const std::string& owner) {
  MutexLock l(&control_mu_);
  std::vector<uint64_t> ids;
  for (const RuleEntryPtr& e : CurrentLocked()->table->Rules()) {
    if (e->owner() == owner) ids.push_back(e->id());
  }
  if (ids.empty()) return 0;
  auto r = UpdateLocked({}, ids, {""}, nullptr);
  if (!r.ok()) return r.status();
  return static_cast<int>(ids.size());
}

absl::StatusOr<int> SSwitch::HoldLease(const std::string& owner,
                                       absl::Duration ttl) {
  if (owner.empty()) {
    return absl::InvalidArgumentError("a lease needs an owner name");
  }
  if (ttl > absl::ZeroDuration()) {
    leases_->Hold(owner, ttl);
    return 0;
  }
  leases_->Release(owner);
  return DeleteOwned(owner);
}

std::vector<std::string> SSwitch::LeaseOwners() const {
  return leases_->Owners();
}

absl::Status SSwitch::Quiesce(const HeaderPattern& pattern, bool on) {
  if (on && HasBypassGuard()) {
    auto matcher = PatternMatcher::Create(pattern);
    if (!matcher.ok()) return matcher.status();
    absl::Status done;
    absl::Status clear = ClearOfBypass(
        [m = std::move(*matcher)](const std::string& file) {
          return m.MatchesFile(file);
        },
        [&] { done = QuiesceNow(pattern, on); });
    return clear.ok() ? done : clear;
  }
  return QuiesceNow(pattern, on);
}

absl::Status SSwitch::QuiesceNow(const HeaderPattern& pattern, bool on) {
  std::deque<Io*> release;
  {
    MutexLock l(&control_mu_);
    const Snapshot& cur = *CurrentLocked();
    auto it = std::find_if(cur.quiesced.begin(), cur.quiesced.end(),
                           [&](const std::shared_ptr<QuiesceGate>& g) {
                             return g->matcher.pattern() == pattern;
                           });
    if (on) {
      if (it != cur.quiesced.end()) return absl::OkStatus();
      auto matcher = PatternMatcher::Create(pattern);
      if (!matcher.ok()) return matcher.status();
      auto snap = std::make_shared<Snapshot>(cur);
      snap->quiesced.push_back(
          std::make_shared<QuiesceGate>(std::move(*matcher)));
      snap->version = cur.version + 1;
      Publish(std::move(snap));
      return absl::OkStatus();
    }
    if (it == cur.quiesced.end()) {
      return absl::NotFoundError(
          StrCat("not quiesced: ", FormatPattern(pattern)));
    }
    std::shared_ptr<QuiesceGate> gate = *it;
    auto snap = std::make_shared<Snapshot>(cur);
    snap->quiesced.erase(snap->quiesced.begin() + (it - cur.quiesced.begin()));
    snap->version = cur.version + 1;
    Publish(std::move(snap));
    MutexLock gl(&gate->mu);
    gate->active = false;
    release.swap(gate->parked);
  }
  Release(std::move(release));
  return absl::OkStatus();
}

void SSwitch::Release(std::deque<Io*> parked) {
  // In arrival order, on the caller's thread, with no lock held.
  for (Io* io : parked) {
    RegisterInflight(io);
    Admit(io);
  }
}

absl::Status SSwitch::Drain(const HeaderPattern& pattern,
                            absl::Duration timeout) {
  auto matcher = PatternMatcher::Create(pattern);
  if (!matcher.ok()) return matcher.status();
  auto waiter = std::make_shared<DrainWaiter>();
  inflight_->Collect(*matcher, waiter);
  MutexLock l(&waiter->mu);
  --waiter->remaining;  // drop the guard
  const bool done =
      waiter->cv.WaitFor(&waiter->mu, absl::ToChronoNanoseconds(timeout),
                         [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiter->mu) {
                           return waiter->remaining == 0;
                         });
  if (!done) {
    return absl::DeadlineExceededError(
        StrCat("drain of ", FormatPattern(pattern), ": ", waiter->remaining,
               " IO(s) still in flight after ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

}  // namespace sroute

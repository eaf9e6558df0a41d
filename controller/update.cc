// SPDX-License-Identifier: Apache-2.0
// The controller's two-phase update across sSwitches (docs/design.md §6).
#include <algorithm>
#include <set>

#include "controller/controller_impl.h"
#include "rpc/rule_codec.h"
#include "rules/parser.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {

using controller_internal::ResultStatus;

absl::StatusOr<UpdateOutcome> Controller::Impl::Update(
    const UpdateSpec& spec, const std::string& owner) {
  const uint64_t start = MonotonicNanos();
  // One update at a time, from its checks to its last commit.
  MutexLock serial(&update_mu);
  // The lease first: if its owner dies during the update, what the update
  // installed still goes when the lease runs out.
  if (spec.lease > absl::ZeroDuration()) HoldLease(owner, spec.lease);
  auto refused = [this](absl::Status s) {
    updates_refused.fetch_add(1, std::memory_order_relaxed);
    return s;
  };
  auto aborted = [this](absl::Status s) {
    updates_aborted.fetch_add(1, std::memory_order_relaxed);
    return s;
  };
  // A controller that stopped leading (on etcd) changes nothing, and says
  // why; a request already past Handle's check may meet this.
  if (!leading.load()) return refused(FollowerError());
  // Check everything before any host hears of it.
  absl::StatusOr<UpdatePlan> plan = PlanUpdate(spec, owner);
  if (!plan.ok()) return refused(plan.status());
  // Phase zero: the rule checker.
  std::string report;
  if (absl::Status s = CheckPlan(*plan, spec.force, &report); !s.ok()) {
    return refused(s);
  }
  if (!leading.load()) return refused(FollowerError());
  if (absl::Status s = CheckHostsConnected(*plan); !s.ok()) return refused(s);
  if (absl::Status s = NumberUpdate(*plan); !s.ok()) return refused(s);
  // Phase 1; a nack (or silence) anywhere leaves the old rules everywhere.
  if (absl::Status s = PrepareEverywhere(*plan); !s.ok()) {
    AbortEverywhere(*plan);
    return aborted(s);
  }
  // Persist before anything is installed.
  absl::StatusOr<uint64_t> version = PersistUpdate(*plan);
  if (!version.ok()) {
    AbortEverywhere(*plan);
    return aborted(version.status());
  }
  // Phase 2.
  CommitEverywhere(*plan, *version);
  CheckerFollows(*plan, *version);
  updates_committed.fetch_add(1, std::memory_order_relaxed);
  update_latency.Record(MonotonicNanos() - start);
  return UpdateOutcome{*version, std::move(plan->cids), std::move(report)};
}

absl::StatusOr<Controller::Impl::UpdatePlan> Controller::Impl::PlanUpdate(
    const UpdateSpec& spec, const std::string& owner) {
  UpdatePlan plan;
  for (const RuleChanges& c : spec.changes) {
    auto it = std::find_if(
        plan.changes.begin(), plan.changes.end(),
        [&](const UpdatePlan::Change& p) { return p.sswitch == c.sswitch; });
    if (it == plan.changes.end()) {
      plan.changes.push_back(UpdatePlan::Change{c.sswitch, {}, {}});
      it = plan.changes.end() - 1;
    }
    for (size_t i = 0; i < c.insert.size(); ++i) {
      // Text is read here, once; a rule read at its edge is checked. From
      // here the store, the checker and the hosts take the parsed form
      // (rpc/rule_codec.h).
      absl::StatusOr<Rule> rule = c.insert[i].Read();
      if (!rule.ok()) {
        return absl::InvalidArgumentError(
            StrCat(c.sswitch, ": rule ", i + 1, ": ", rule.status().message()));
      }
      it->insert.push_back(ManagedRuleOf(*rule, owner));
    }
    for (uint64_t cid : c.remove) {
      auto where = store->SSwitchOf(cid);
      if (!where.ok()) return where.status();
      if (!*where || **where != c.sswitch) {
        return absl::NotFoundError(StrCat("no rule ", cid, " on ", c.sswitch));
      }
      it->remove.push_back(cid);
    }
  }
  for (const std::string& f : spec.flows) {
    if (auto p = ParsePattern(f); !p.ok()) {
      return absl::InvalidArgumentError(
          StrCat("flow ", f, ": ", p.status().message()));
    }
  }
  if (plan.changes.empty()) {
    return absl::InvalidArgumentError("an empty update");
  }
  plan.flows = spec.flows;
  plan.timeout = spec.timeout;
  return plan;
}

absl::Status Controller::Impl::CheckHostsConnected(const UpdatePlan& plan) {
  MutexLock l(&mu);
  for (const UpdatePlan::Change& p : plan.changes) {
    auto it = sessions.find(p.sswitch);
    if (it == sessions.end() || !it->second.connected) {
      return absl::UnavailableError(StrCat(
          "host ", p.sswitch,
          it == sessions.end()
              ? " has not registered with this controller (after a failover"
                " a host registers again within seconds)"
              : " is not connected",
          "; nothing changed"));
    }
  }
  return absl::OkStatus();
}

absl::Status Controller::Impl::NumberUpdate(UpdatePlan& plan) {
  size_t inserts = 0;
  for (const UpdatePlan::Change& p : plan.changes) inserts += p.insert.size();
  if (inserts > 0) {
    auto first = store->NextCids(inserts);
    if (!first.ok()) return first.status();
    uint64_t next = *first;
    for (UpdatePlan::Change& p : plan.changes) {
      for (proto::ManagedRule& m : p.insert) {
        m.set_cid(next++);
        plan.cids.push_back(m.cid());
      }
    }
  }
  MutexLock l(&mu);
  plan.id = next_update++;
  return absl::OkStatus();
}

std::vector<std::vector<size_t>> Controller::Impl::PrepareWaves(
    const UpdatePlan& plan) {
  const size_t n = plan.changes.size();
  // upstream[b] holds a if a's endpoints name b (by sSwitch name or by
  // address): a sends IO to b.
  std::vector<std::set<size_t>> upstream(n);
  {
    MutexLock l(&mu);
    for (size_t a = 0; a < n; ++a) {
      auto sa = sessions.find(plan.changes[a].sswitch);
      if (sa == sessions.end()) continue;
      for (size_t b = 0; b < n; ++b) {
        if (a == b) continue;
        auto sb = sessions.find(plan.changes[b].sswitch);
        const std::string& b_name = plan.changes[b].sswitch;
        const std::string b_address =
            sb == sessions.end() ? std::string() : sb->second.host.address();
        for (const proto::EndpointInfo& e : sa->second.host.endpoints()) {
          if (e.name() == b_name ||
              (!b_address.empty() && e.address() == b_address)) {
            upstream[b].insert(a);
          }
        }
      }
    }
  }
  // Layers: a host goes after every host that sends to it; a cycle puts
  // the rest in one last wave (as before: all at once).
  std::vector<std::vector<size_t>> waves;
  std::vector<bool> placed(n, false);
  size_t left = n;
  while (left > 0) {
    std::vector<size_t> wave;
    for (size_t b = 0; b < n; ++b) {
      if (placed[b]) continue;
      bool ready = true;
      for (size_t a : upstream[b]) ready = ready && placed[a];
      if (ready) wave.push_back(b);
    }
    if (wave.empty()) {
      for (size_t b = 0; b < n; ++b) {
        if (!placed[b]) wave.push_back(b);
      }
    }
    for (size_t b : wave) placed[b] = true;
    left -= wave.size();
    waves.push_back(std::move(wave));
  }
  return waves;
}

// Phase one host by host in the direction IO flows (PrepareWaves): a host
// parks and drains its flows before the hosts it sends them to park
// theirs. All at once, a drain upstream would wait for IOs parked
// downstream by the same update, until its timeout.
absl::Status Controller::Impl::PrepareEverywhere(const UpdatePlan& plan) {
  const std::vector<std::vector<size_t>> waves = PrepareWaves(plan);
  const uint32_t drain_ms =
      static_cast<uint32_t>(absl::ToInt64Milliseconds(plan.timeout));
  // A host holds its prepared update while the later waves prepare.
  const absl::Duration per_wave = plan.timeout + options.command_timeout;
  const uint32_t lease_ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(
      per_wave * static_cast<int64_t>(waves.size()) + options.command_timeout));
  for (const std::vector<size_t>& wave : waves) {
    std::vector<std::pair<std::string, proto::Command>> prepares;
    for (size_t i : wave) {
      const UpdatePlan::Change& p = plan.changes[i];
      proto::Command c;
      proto::Prepare* pr = c.mutable_prepare();
      pr->set_update(plan.id);
      for (const auto& m : p.insert) *pr->add_insert() = m;
      for (uint64_t cid : p.remove) pr->add_remove(cid);
      for (const std::string& f : plan.flows) pr->add_flows(f);
      pr->set_drain_timeout_ms(drain_ms);
      pr->set_lease_ms(lease_ms);
      prepares.emplace_back(p.sswitch, std::move(c));
    }
    auto prepared = SendAll(prepares, per_wave);
    for (size_t k = 0; k < prepared.size(); ++k) {
      absl::Status s =
          prepared[k].ok() ? ResultStatus(*prepared[k]) : prepared[k].status();
      if (!s.ok()) {
        return absl::Status(s.code(),
                            StrCat(prepares[k].first, " refused the update: ",
                                   s.message(), "; no host changed"));
      }
    }
  }
  return absl::OkStatus();
}

void Controller::Impl::AbortEverywhere(const UpdatePlan& plan) {
  std::vector<std::pair<std::string, proto::Command>> aborts;
  for (const UpdatePlan::Change& p : plan.changes) {
    proto::Command c;
    c.mutable_abort()->set_update(plan.id);
    aborts.emplace_back(p.sswitch, std::move(c));
  }
  (void)SendAll(aborts, options.command_timeout);
}

absl::StatusOr<uint64_t> Controller::Impl::PersistUpdate(
    const UpdatePlan& plan) {
  const uint64_t version = store->version() + 1;
  std::vector<ControllerStore::RuleChange> changes;
  for (const UpdatePlan::Change& p : plan.changes) {
    changes.push_back({p.sswitch, p.insert, p.remove});
  }
  if (absl::Status s = store->Apply(changes, version); !s.ok()) {
    return absl::Status(s.code(), StrCat(s.message(), "; no host changed"));
  }
  MutexLock l(&mu);
  for (const UpdatePlan::Change& p : plan.changes) {
    for (uint64_t cid : p.remove) rule_cache.erase(cid);
    for (const auto& m : p.insert) rule_cache[m.cid()] = m;
  }
  return version;
}

void Controller::Impl::CommitEverywhere(const UpdatePlan& plan,
                                        uint64_t version) {
  std::vector<std::pair<std::string, proto::Command>> commits;
  for (const UpdatePlan::Change& p : plan.changes) {
    proto::Command c;
    c.mutable_commit()->set_update(plan.id);
    c.mutable_commit()->set_version(version);
    commits.emplace_back(p.sswitch, std::move(c));
  }
  auto committed = SendAll(commits, options.command_timeout);
  for (size_t i = 0; i < committed.size(); ++i) {
    const std::string& sswitch = plan.changes[i].sswitch;
    absl::Status s =
        committed[i].ok() ? ResultStatus(*committed[i]) : committed[i].status();
    if (!s.ok()) {
      LogWarning("update ", plan.id, ": commit on ", sswitch, " failed (",
                 s.message(), "); reconciling it");
      ReconcileHost(sswitch);
    } else {
      MutexLock l(&mu);
      auto it = sessions.find(sswitch);
      if (it != sessions.end()) it->second.version = committed[i]->version();
    }
  }
}

void Controller::Impl::ReconcileHost(const std::string& sswitch) {
  auto rules = store->Rules(sswitch);
  if (!rules.ok()) return;
  proto::Command c;
  for (auto& m : *rules) *c.mutable_reconcile()->add_rules() = m;
  (void)SendCommand(sswitch, std::move(c), options.command_timeout);
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// Leases of rule owners at the controller (UpdateSpec::lease): a tool that
// installs rules for itself (sroute-trace) renews its lease while it runs;
// when it stops renewing, every rule it owns is removed in one update.
// Leases are kept in the store, so a restarted controller ends them too.
#include <sstream>

#include "absl/strings/numbers.h"
#include "controller/controller_impl.h"
#include "stages/steering/sweep_wait.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

using controller_internal::ReplyWith;
using controller_internal::ResultStatus;

constexpr char kLeaseApp[] = "controller";
constexpr char kLeaseKey[] = "leases";

// "OWNER\tTTL_MS\n" a lease.
std::string SerializeLeases(const std::map<std::string, absl::Duration>& m) {
  std::string out;
  for (const auto& [owner, ttl] : m) {
    StrAppend(&out, owner, "\t", absl::ToInt64Milliseconds(ttl), "\n");
  }
  return out;
}

}  // namespace

void Controller::Impl::HoldLease(const std::string& owner, absl::Duration ttl) {
  leases->Hold(owner, ttl);
  MutexLock l(&leases_mu);
  auto [it, added] = lease_ttls.try_emplace(owner, ttl);
  if (!added && it->second == ttl) return;
  it->second = ttl;
  if (absl::Status s =
          store->PutAppState(kLeaseApp, kLeaseKey, SerializeLeases(lease_ttls));
      !s.ok()) {
    LogWarning("cannot keep the lease of ", owner, ": ", s.message());
  }
}

absl::StatusOr<uint64_t> Controller::Impl::EndLease(const std::string& owner) {
  leases->Release(owner);
  {
    MutexLock l(&leases_mu);
    if (lease_ttls.erase(owner) != 0) {
      (void)store->PutAppState(kLeaseApp, kLeaseKey,
                               SerializeLeases(lease_ttls));
    }
  }
  UpdateSpec spec;
  auto sswitches = store->SSwitches();
  if (!sswitches.ok()) return sswitches.status();
  for (const std::string& name : *sswitches) {
    auto rules = store->Rules(name);
    if (!rules.ok()) return rules.status();
    RuleChanges change{name, {}, {}};
    for (const proto::ManagedRule& r : *rules) {
      if (r.owner() == owner) change.remove.push_back(r.cid());
    }
    if (!change.remove.empty()) spec.changes.push_back(std::move(change));
  }
  if (spec.changes.empty()) return 0;
  // A dead tool's rules go whatever the checker would say of the rest.
  spec.force = true;
  auto outcome = Update(spec, owner);
  if (!outcome.ok()) return outcome.status();
  return outcome->version;
}

void Controller::Impl::RestoreLeases() {
  auto text = store->GetAppState(kLeaseApp, kLeaseKey);
  if (!text.ok()) return;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.rfind('\t');
    if (tab == std::string::npos) continue;
    int64_t ms = 0;
    if (!absl::SimpleAtoi(line.substr(tab + 1), &ms) || ms <= 0) continue;
    const std::string owner = line.substr(0, tab);
    MutexLock l(&leases_mu);
    lease_ttls[owner] = absl::Milliseconds(ms);
    leases->Hold(owner, absl::Milliseconds(ms));
  }
}

void Controller::Impl::HandleRenewLease(Call& call) {
  const proto::RenewLease& r = call.request().controller().renew_lease();
  bool held;
  {
    MutexLock l(&leases_mu);
    held = lease_ttls.contains(r.owner());
  }
  if (!held) {
    call.ReplyStatus(absl::NotFoundError(
        StrCat(r.owner(),
               " holds no lease (it ran out: its rules were "
               "removed)")));
    return;
  }
  proto::ControllerReply reply;
  if (r.ttl_ms() != 0) {
    HoldLease(r.owner(), absl::Milliseconds(r.ttl_ms()));
    reply.mutable_update();
  } else {
    auto version = EndLease(r.owner());
    if (!version.ok()) {
      call.ReplyStatus(version.status());
      return;
    }
    reply.mutable_update()->set_version(*version);
  }
  ReplyWith(call, std::move(reply));
}

void Controller::Impl::HandleControlAt(Call& call) {
  const proto::ControlAt& at = call.request().controller().control_at();
  const auto what = at.request().request_case();
  if (what != proto::ControlRequest::kTraces &&
      what != proto::ControlRequest::kSlowOps &&
      what != proto::ControlRequest::kStats &&
      what != proto::ControlRequest::kCopy &&
      what != proto::ControlRequest::kSetProfiles &&
      what != proto::ControlRequest::kProfileEndpoint) {
    call.ReplyStatus(absl::InvalidArgumentError(
        "through the controller: traces, slow_ops, stats, copy, "
        "set_profiles and profile_endpoint requests only (rules change by "
        "updates)"));
    return;
  }
  proto::Command c;
  *c.mutable_control() = at.request();
  // A copy or a profile sweep takes up to its budget at the host (a sweep
  // one step more: ProfileSweepWait).
  absl::Duration wait = options.command_timeout;
  if (what == proto::ControlRequest::kCopy) {
    wait += absl::Milliseconds(at.request().copy().budget_ms());
  } else if (what == proto::ControlRequest::kProfileEndpoint) {
    wait += ProfileSweepWait(at.request().profile_endpoint());
  }
  auto r = SendCommand(at.sswitch(), std::move(c), wait);
  if (!r.ok()) {
    call.ReplyStatus(r.status());
    return;
  }
  if (absl::Status s = ResultStatus(*r); !s.ok()) {
    call.ReplyStatus(s);
    return;
  }
  if (what == proto::ControlRequest::kCopy && r->control().code() == 0) {
    ForgetAfterReclaim(at.sswitch(), at.request().copy(), r->control().copy());
  }
  proto::ControllerReply reply;
  *reply.mutable_control() = std::move(*r->mutable_control());
  ReplyWith(call, std::move(reply));
}

}  // namespace sroute

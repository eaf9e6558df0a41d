// SPDX-License-Identifier: Apache-2.0
#include "controller/leadership.h"

#include <thread>

#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

struct Leadership::Impl {
  Options options;
  // The loop's client (keep-alives, campaigns) and the readers' (Members),
  // so that a slow read never delays a keep-alive.
  std::unique_ptr<EtcdClient> keep;
  std::unique_ptr<EtcdClient> query;
  std::thread thread;

  mutable Mutex mu;
  CondVar cv;
  bool stopping ABSL_GUARDED_BY(mu) = false;
  bool leading ABSL_GUARDED_BY(mu) = false;
  bool lost ABSL_GUARDED_BY(mu) = false;
  std::string leader_address ABSL_GUARDED_BY(mu);

  // The loop's own (no lock: only its thread touches them).
  int64_t lease = 0;
  int64_t revision = 0;  // the leadership's, while leading
  absl::Time lease_ok_at;
  absl::Time last_warning = absl::InfinitePast();

  std::string LeaderKey() const { return options.prefix + "leader"; }
  std::string MemberKey() const {
    return options.prefix + "members/" + options.id;
  }
  absl::Duration Tick() const {
    return std::max(options.ttl / 4, absl::Milliseconds(100));
  }
  void Warn(const std::string& what) {
    // One warning a TTL: etcd away is loud enough once.
    if (absl::Now() - last_warning < options.ttl) return;
    last_warning = absl::Now();
    LogWarning("leader election: ", what);
  }

  void Loop();
  bool KeepLease();
  void Campaign();
  void CheckStillLeading();
  // Reads who leads (a member that lost its leadership still points there).
  void ReadLeader();
  // Gives the lease back (once etcd answers): nothing of the lost
  // leadership holds the leader key.
  void RevokeLease();
  void SetLeader(const etcd::RangeResponse& r);
  void Lose(const std::string& why);
};

void Leadership::Impl::Lose(const std::string& why) {
  {
    MutexLock l(&mu);
    if (!leading) return;
    leading = false;
    lost = true;
    leader_address.clear();
  }
  revision = 0;
  LogWarning("this controller no longer leads: ", why);
  if (options.lost) options.lost(why);
}

// Grants the lease if there is none, else keeps it alive; false when there
// is no lease to campaign with.
bool Leadership::Impl::KeepLease() {
  const int64_t ttl_s = std::max<int64_t>(1, absl::ToInt64Seconds(options.ttl));
  if (lease == 0) {
    auto g = keep->LeaseGrant(ttl_s);
    if (!g.ok()) {
      Warn(StrCat("no lease from etcd: ", g.status().message()));
      return false;
    }
    lease = g->id();
    lease_ok_at = absl::Now();
    etcd::PutRequest put;
    put.set_key(MemberKey());
    put.set_value(options.address);
    put.set_lease(lease);
    if (auto p = keep->Put(put); !p.ok()) {
      Warn(StrCat("cannot list this member: ", p.status().message()));
    }
    return true;
  }
  auto k = keep->LeaseKeepAlive(lease);
  if (k.ok() && k->ttl() > 0) {
    lease_ok_at = absl::Now();
    return true;
  }
  if (k.ok()) {  // etcd says the lease is gone: it expired while we slept
    lease = 0;
    Lose(
        "its etcd lease expired (the process was paused or cut off from "
        "etcd for longer than the TTL)");
    return false;
  }
  Warn(StrCat("keep-alive failed: ", k.status().message()));
  if (absl::Now() - lease_ok_at >= options.ttl) {
    // The lease may have expired at etcd by now: another may lead.
    Lose(StrCat("no keep-alive reached etcd for a TTL (", k.status().message(),
                ")"));
  }
  return absl::Now() - lease_ok_at < options.ttl;
}

void Leadership::Impl::Campaign() {
  etcd::TxnRequest txn;
  etcd::Compare* c = txn.add_compare();
  c->set_key(LeaderKey());
  c->set_target(etcd::Compare::CREATE);
  c->set_result(etcd::Compare::EQUAL);
  c->set_create_revision(0);  // no leader key
  etcd::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(LeaderKey());
  put->set_value(options.id + "\n" + options.address);
  put->set_lease(lease);
  txn.add_failure()->mutable_request_range()->set_key(LeaderKey());
  auto r = keep->Txn(txn);
  if (!r.ok()) {
    Warn(StrCat("campaign: ", r.status().message()));
    return;
  }
  if (r->succeeded()) {
    revision = r->header().revision();
    {
      MutexLock l(&mu);
      leading = true;
      leader_address = options.address;
    }
    LogInfo("this controller (", options.id, ") leads (revision ", revision,
            ")");
    if (options.elected && !options.elected(revision)) {
      Lose("taking over failed");
    }
    return;
  }
  if (r->responses_size() > 0) SetLeader(r->responses(0).response_range());
}

void Leadership::Impl::SetLeader(const etcd::RangeResponse& r) {
  std::string address;
  if (r.kvs_size() > 0) {
    const std::string& v = r.kvs(0).value();
    const size_t nl = v.find('\n');
    if (nl != std::string::npos) address = v.substr(nl + 1);
  }
  MutexLock l(&mu);
  leader_address = address;
}

void Leadership::Impl::RevokeLease() {
  if (lease == 0) return;
  absl::Status s = keep->LeaseRevoke(lease);
  if (s.ok() || absl::IsNotFound(s)) {  // NotFound: it ran out meanwhile
    lease = 0;
    LogInfo("leader election: lease of the lost leadership revoked");
  }
}

void Leadership::Impl::ReadLeader() {
  etcd::RangeRequest req;
  req.set_key(LeaderKey());
  if (auto r = keep->Range(req); r.ok()) SetLeader(*r);
}

void Leadership::Impl::CheckStillLeading() {
  etcd::RangeRequest req;
  req.set_key(LeaderKey());
  auto r = keep->Range(req);
  if (!r.ok()) return;  // KeepLease decides when etcd is away too long
  if (r->kvs_size() == 0 || r->kvs(0).create_revision() != revision) {
    Lose("its leader key is gone from etcd");
  }
}

void Leadership::Impl::Loop() {
  while (true) {
    {
      MutexLock l(&mu);
      if (stopping) return;
    }
    bool is_leading, has_lost;
    {
      MutexLock l(&mu);
      is_leading = leading;
      has_lost = lost;
    }
    if (has_lost) {
      // A member that lost its leadership keeps no lease alive: its leader
      // key would outlive the leadership and hold off every other member
      // until this process exits (after an etcd outage, for as long as its
      // supervisor takes). The lease goes as soon as etcd answers.
      RevokeLease();
      ReadLeader();
    } else if (const bool has_lease = KeepLease(); is_leading) {
      CheckStillLeading();
    } else if (has_lease) {
      Campaign();
    } else {
      ReadLeader();
    }
    MutexLock l(&mu);
    cv.WaitFor(&mu, std::chrono::nanoseconds(absl::ToInt64Nanoseconds(Tick())),
               [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping; });
  }
}

absl::StatusOr<std::unique_ptr<Leadership>> Leadership::Start(
    EtcdClient::Options etcd, Options options) {
  if (options.ttl < absl::Seconds(1)) {
    return absl::InvalidArgumentError("the leader lease TTL is at least 1 s");
  }
  if (options.id.empty() || options.id.find('\n') != std::string::npos) {
    return absl::InvalidArgumentError("a controller id is one non-empty line");
  }
  auto impl = std::make_shared<Impl>();
  // A keep-alive round (every member tried once) must fit in a TTL, or a
  // leader would lose its lease while still asking.
  EtcdClient::Options keep_options = etcd;
  keep_options.timeout =
      std::min(etcd.timeout,
               std::max(absl::Milliseconds(250),
                        options.ttl /
                            (2 * static_cast<int64_t>(etcd.endpoints.size()))));
  auto keep = EtcdClient::Create(keep_options);
  if (!keep.ok()) return keep.status();
  auto query = EtcdClient::Create(etcd);
  if (!query.ok()) return query.status();
  impl->keep = *std::move(keep);
  impl->query = *std::move(query);
  impl->options = std::move(options);
  impl->thread = std::thread([p = impl.get()] { p->Loop(); });
  return std::unique_ptr<Leadership>(new Leadership(std::move(impl)));
}

Leadership::Leadership(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Leadership::~Leadership() {
  {
    MutexLock l(&impl_->mu);
    impl_->stopping = true;
  }
  impl_->cv.SignalAll();
  impl_->thread.join();
  if (impl_->lease != 0) {
    // The leader key and the member's go with the lease: the others need
    // not wait for it to run out.
    if (absl::Status s = impl_->keep->LeaseRevoke(impl_->lease); !s.ok()) {
      LogWarning("leader election: revoking the lease: ", s.message(),
                 " (it runs out by itself)");
    }
  }
}

bool Leadership::leading() const {
  MutexLock l(&impl_->mu);
  return impl_->leading;
}

std::string Leadership::leader_address() const {
  MutexLock l(&impl_->mu);
  return impl_->leader_address;
}

std::string Leadership::leader_key() const { return impl_->LeaderKey(); }

absl::StatusOr<std::vector<Leadership::Member>> Leadership::Members() {
  etcd::RangeRequest leader;
  leader.set_key(impl_->LeaderKey());
  auto l = impl_->query->Range(leader);
  if (!l.ok()) return l.status();
  std::string leader_id;
  if (l->kvs_size() > 0) {
    const std::string& v = l->kvs(0).value();
    leader_id = v.substr(0, v.find('\n'));
  }
  const std::string prefix = impl_->options.prefix + "members/";
  etcd::RangeRequest members;
  members.set_key(prefix);
  members.set_range_end(EtcdPrefixEnd(prefix));
  auto m = impl_->query->Range(members);
  if (!m.ok()) return m.status();
  std::vector<Member> out;
  for (const etcd::KeyValue& kv : m->kvs()) {
    Member member;
    member.id = kv.key().substr(prefix.size());
    member.address = kv.value();
    member.leader = member.id == leader_id;
    out.push_back(std::move(member));
  }
  return out;
}

}  // namespace sroute

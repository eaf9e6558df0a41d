// SPDX-License-Identifier: Apache-2.0
// Taking the lead and losing it: the store opened (RocksDB, or etcd with
// its election), what a leader loads and starts, what a controller that
// does not lead answers (controller_impl.h).
#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "controller/app_runner.h"
#include "controller/controller.h"
#include "controller/controller_impl.h"
#include "controller/store.h"
#include "rpc/channel.h"
#include "rpc/io_threads.h"
#include "rpc/leader.h"
#include "rpc/server.h"
#include "rules/parser.h"
#include "sswitch/stats.h"
#include "util/background.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

using controller_internal::kControllerApp;
using controller_internal::kKeptApps;
using controller_internal::ReplyWith;
using controller_internal::ResultStatus;

namespace {

// "etcd://H:P,H:P/PREFIX" into its members and prefix ("/sroute/" by
// default; always ending in '/').
absl::Status ParseEtcdStore(const std::string& spec,
                            std::vector<std::string>* endpoints,
                            std::string* prefix) {
  std::string_view rest = std::string_view(spec).substr(7);
  const size_t slash = rest.find('/');
  *prefix = slash == std::string_view::npos ? "/sroute/"
                                            : std::string(rest.substr(slash));
  if (prefix->back() != '/') prefix->push_back('/');
  rest = rest.substr(0, slash);
  for (std::string_view e : StrSplit(rest, ',')) {
    if (!e.empty()) endpoints->emplace_back(e);
  }
  if (endpoints->empty()) {
    return absl::InvalidArgumentError(
        StrCat("store '", spec, "': no etcd member (etcd://HOST:PORT,...)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Controller::Impl::OpenStore() {
  std::string spec = options.store;
  if (spec.empty() && !options.db_dir.empty())
    spec = "rocksdb:" + options.db_dir;
  if (spec.empty()) {
    return absl::InvalidArgumentError(
        "no store (--store rocksdb:DIR or etcd://HOST:PORT,...; --db DIR)");
  }
  if (spec.rfind("rocksdb:", 0) == 0) {
    auto s = ControllerStore::Open(spec.substr(8));
    if (!s.ok()) return s.status();
    store = *std::move(s);
    return absl::OkStatus();
  }
  if (spec.rfind("etcd://", 0) != 0) {
    return absl::InvalidArgumentError(
        StrCat("store '", spec, "': not rocksdb:DIR nor etcd://HOST:PORT,..."));
  }
  std::vector<std::string> endpoints;
  std::string prefix;
  if (absl::Status s = ParseEtcdStore(spec, &endpoints, &prefix); !s.ok()) {
    return s;
  }
  EtcdClient::Options eo;
  eo.endpoints = endpoints;
  auto client = EtcdClient::Create(eo);
  if (!client.ok()) return client.status();
  etcd = *std::move(client);
  etcd_prefix = prefix;
  leader_key = prefix + "leader";
  // Members starting beside the controller (a boot) answer a little later:
  // no member answering is waited out, anything else is final.
  const absl::Time give_up = absl::Now() + options.store_wait;
  bool said = false;
  while (true) {
    // Under PREFIX"state/", beside the election's keys.
    auto kv = std::make_unique<EtcdKv>(etcd.get(), prefix + "state/",
                                       options.etcd_max_txn_ops);
    EtcdKv* const raw = kv.get();
    // The leader's reads stay in the process (CachedKv): it is the only
    // writer. Loaded again when this controller takes over (Reload).
    auto s = ControllerStore::Open(std::make_unique<CachedKv>(std::move(kv)));
    if (s.ok()) {
      etcd_kv = raw;
      store = *std::move(s);
      if (said) LogInfo("store ", spec, " answers");
      return absl::OkStatus();
    }
    if (!absl::IsUnavailable(s.status()) || absl::Now() >= give_up) {
      return absl::Status(
          s.status().code(),
          StrCat("store ", spec, ": ", s.status().message(),
                 absl::IsUnavailable(s.status())
                     ? StrCat(" (waited ",
                              absl::FormatDuration(options.store_wait),
                              ", --store-wait-s)")
                     : ""));
    }
    if (!said) {
      LogWarning("store ", spec, " does not answer yet (", s.status().message(),
                 "); waiting up to ", absl::FormatDuration(options.store_wait));
      said = true;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

std::string Controller::Impl::LeaderAddress() {
  MutexLock l(&leadership_mu);
  return leadership != nullptr ? leadership->leader_address() : "";
}

absl::Status Controller::Impl::FollowerError() {
  std::string why;
  {
    MutexLock l(&mu);
    why = deposed;
  }
  return NotLeaderError(SelfAddress(), LeaderAddress(), why);
}

std::string Controller::Impl::SelfAddress() {
  if (!options.advertise.empty()) return options.advertise;
  MutexLock l(&leadership_mu);
  return listening;
}

absl::Status Controller::Impl::BecomeLeader() {
  // What the previous leader wrote is the truth now.
  if (absl::Status s = store->Reload(); !s.ok()) return s;
  auto next_epoch = store->NextEpoch();
  if (!next_epoch.ok()) return next_epoch.status();
  epoch = *next_epoch;
  auto names = store->SSwitches();
  if (!names.ok()) return names.status();
  std::map<uint64_t, proto::ManagedRule> cache;
  for (const std::string& name : *names) {
    auto rules = store->Rules(name);
    if (!rules.ok()) return rules.status();
    for (auto& m : *rules) cache[m.cid()] = m;
  }
  {
    MutexLock l(&mu);
    rule_cache = std::move(cache);
  }
  RestoreLeases();
  for (const std::string& spec : options.apps) {
    if (absl::Status s = StartApp(spec, true, false);
        !s.ok() && !absl::IsAlreadyExists(s)) {
      return s;
    }
  }
  // Apps started by an administrator (sroutectl apps start) run again.
  if (auto kept = store->GetAppState(kControllerApp, kKeptApps); kept.ok()) {
    for (std::string_view spec : StrSplit(*kept, '\n')) {
      if (spec.empty()) continue;
      if (absl::Status s = StartApp(std::string(spec), false, false);
          !s.ok() && !absl::IsAlreadyExists(s)) {
        LogWarning("app ", spec,
                   " (started with sroutectl) does not start: ", s.message());
      }
    }
  }
  sweeper = std::thread([this] { Sweep(); });
  leading.store(true);
  return absl::OkStatus();
}

void Controller::Impl::LeadershipLost(const std::string& why) {
  leading.store(false);
  if (etcd_kv != nullptr) etcd_kv->SetFence("", 0);  // nothing more written
  LogWarning("the controller stops leading: ", why);
  {
    MutexLock l(&mu);
    deposed = why;
  }
  if (options.on_leadership_lost && etcd != nullptr &&
      !deposed_watch.joinable()) {
    deposed_watch = std::thread([this, why, key = leader_key] {
      while (true) {
        {
          MutexLock l(&mu);
          if (stopping) return;
        }
        // A read etcd serves only with a quorum (linearizable).
        etcd::RangeRequest probe;
        probe.set_key(key);
        if (etcd->Range(probe).ok()) break;
        MutexLock l(&mu);
        sweep_cv.WaitFor(
            &mu, std::chrono::milliseconds(500),
            [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return stopping; });
      }
      options.on_leadership_lost(why);
    });
  }
  // The apps stop; hosts polling here are told the leader.
  const auto running = Apps();
  for (auto& app : *running) app->Stop();
  std::vector<std::unique_ptr<Call>> polls;
  {
    MutexLock l(&mu);
    for (auto& [name, s] : sessions) {
      if (s.poll) polls.push_back(std::move(s.poll));
      s.connected = false;
    }
  }
  for (auto& c : polls) c->ReplyStatus(FollowerError());
}

}  // namespace sroute

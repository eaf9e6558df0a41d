// SPDX-License-Identifier: Apache-2.0
// The controller's views of its hosts (Topology, Stats, for the apps and
// the administrator) and its sweep: hosts gone silent, polls and turns held
// too long, stats handed to the apps (controller_impl.h).
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

using controller_internal::ReplyWith;
using controller_internal::ResultStatus;

namespace {

// A WaitCommands or WaitEvents call is answered (empty) after this long,
// well inside the caller's own deadline.
constexpr absl::Duration kHoldCall = absl::Seconds(15);
// A host that got its turn for a controller-bound IO and never said it was
// done loses the turn after this long.
constexpr absl::Duration kTurnLease = absl::Seconds(30);

}  // namespace

std::vector<TopologyHost> Controller::Impl::Topology() {
  std::vector<TopologyHost> out;
  // Read from the store before taking mu, as kListHosts does. A store that
  // cannot be read leaves the hosts connected now.
  auto stored = store->Hosts();
  if (!stored.ok()) {
    LogWarning("topology: the store cannot be read (",
               stored.status().message(), "); connected hosts only");
  }
  MutexLock l(&mu);
  std::vector<proto::HostInfo> hosts;
  if (stored.ok()) {
    hosts = *std::move(stored);
  } else {
    for (const auto& [name, s] : sessions) hosts.push_back(s.host);
  }
  for (const proto::HostInfo& h : hosts) {
    TopologyHost t;
    t.info = h;
    auto it = sessions.find(h.sswitch());
    if (it != sessions.end()) {
      t.info = it->second.host;
      t.connected = it->second.connected;
      t.version = it->second.version;
    }
    out.push_back(std::move(t));
  }
  return out;
}

StatsSnapshot Controller::Impl::Stats() {
  StatsSnapshot snap;
  snap.at = absl::Now();
  MutexLock l(&mu);
  for (const auto& [name, s] : sessions) {
    HostStats h;
    h.sswitch = name;
    h.connected = s.connected;
    h.version = s.version;
    h.in_flight = s.in_flight;
    h.interval = s.interval;
    h.stages = s.stages;
    h.gauges = s.gauges;
    for (const auto& key : s.active) {
      auto it = s.rules.find(key);
      if (it != s.rules.end()) h.rules.push_back(it->second);
    }
    snap.hosts.push_back(std::move(h));
  }
  return snap;
}

// --- Housekeeping ---

void Controller::Impl::Sweep() {
  absl::Time next_stats = absl::Now() + options.stats_interval;
  ReleasableMutexLock l(&mu);
  while (!stopping) {
    sweep_cv.WaitFor(&mu, std::chrono::milliseconds(100));
    if (stopping) break;
    const absl::Time now = absl::Now();
    std::vector<std::unique_ptr<RpcServer::Call>> empty_replies;
    for (auto& [name, s] : sessions) {
      if (s.poll && now - s.poll_since > kHoldCall) {
        empty_replies.push_back(std::move(s.poll));
      }
      if (s.connected && now - s.last_seen > options.host_timeout) {
        s.connected = false;
        LogWarning("host ", name, " is silent: disconnected");
      }
    }
    for (auto it = event_waiters.begin(); it != event_waiters.end();) {
      if (now - it->second > kHoldCall) {
        empty_replies.push_back(std::move(it->first));
        it = event_waiters.erase(it);
      } else {
        ++it;
      }
    }
    // Turns held too long pass on (the host holding one is gone).
    std::vector<std::pair<std::unique_ptr<RpcServer::Call>, uint64_t>> grants;
    for (auto it = turns.begin(); it != turns.end();) {
      FileTurns& t = it->second;
      if (t.busy && now - t.granted > kTurnLease) {
        if (t.waiting.empty()) {
          it = turns.erase(it);
          continue;
        }
        t.turn++;
        t.granted = now;
        grants.emplace_back(std::move(t.waiting.front()), t.turn);
        t.waiting.pop_front();
      }
      ++it;
    }
    const bool stats_due = now >= next_stats;
    if (stats_due) next_stats = now + options.stats_interval;
    l.Unlock();
    for (auto& c : empty_replies) ReplyWith(*c, proto::ControllerReply());
    for (auto& [c, turn] : grants) Grant(std::move(c), turn);
    if (stats_due) {
      StatsSnapshot snap = Stats();
      const std::shared_ptr<const AppList> apps = Apps();
      for (auto& app : *apps) app->OnStats(snap);
      proto::Event e;
      e.set_stats(true);
      AddEvent(std::move(e));
    }
    l.Lock();
  }
}

}  // namespace sroute

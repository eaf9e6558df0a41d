// SPDX-License-Identifier: Apache-2.0
// What the controller exports at /metrics (--metrics): its hosts, rules,
// updates and stats reports, and its RPC server. docs/admin/metrics.md.
#include <map>
#include <string>
#include <utility>

#include "controller/controller_impl.h"
#include "host/host_metrics.h"

namespace sroute {

void Controller::Impl::AddMetrics(metrics::Exposition* out) {
  using metrics::MetricType;
  // (role, connected) → hosts; every role and state appears, 0 or not.
  std::map<std::pair<std::string, bool>, int> hosts = {{{"fuse", false}, 0},
                                                       {{"fuse", true}, 0},
                                                       {{"server", false}, 0},
                                                       {{"server", true}, 0}};
  size_t rules = 0;
  {
    MutexLock l(&mu);
    for (const auto& [name, s] : sessions) {
      ++hosts[{s.host.role(), s.connected}];
    }
    rules = rule_cache.size();
  }
  auto& host_family = out->Declare(
      "sroute_controller_hosts", MetricType::kGauge,
      "Hosts registered since the controller started, by role and whether "
      "they are connected now");
  for (const auto& [key, n] : hosts) {
    host_family.Add({{"role", key.first},
                     {"state", key.second ? "connected" : "disconnected"}},
                    n);
  }
  out->Declare("sroute_controller_rules", MetricType::kGauge,
               "Rules the controller manages, every sSwitch's")
      .Add({}, static_cast<double>(rules));
  out->Declare("sroute_controller_version", MetricType::kGauge,
               "Version of the latest committed update")
      .Add({}, static_cast<double>(store->version()));
  out->Declare("sroute_controller_leading", MetricType::kGauge,
               "1 while this controller leads (always on RocksDB; on etcd "
               "one of the controllers sharing the store)")
      .Add({}, leading.load() ? 1 : 0);
  auto& updates = out->Declare(
      "sroute_controller_updates_total", MetricType::kCounter,
      "Updates, by how they ended: committed; aborted after phase 1 began "
      "(a host said no or was silent; every sSwitch kept its rules); "
      "refused before any host heard of them (a bad rule, an unknown or "
      "disconnected sSwitch, the rule checker)");
  updates.Add({{"result", "committed"}},
              static_cast<double>(updates_committed.load()));
  updates.Add({{"result", "aborted"}},
              static_cast<double>(updates_aborted.load()));
  updates.Add({{"result", "refused"}},
              static_cast<double>(updates_refused.load()));
  metrics::HistogramData latency =
      metrics::HistogramData::Empty(metrics::LatencyBounds());
  LatencyHistogram::Counts buckets;
  update_latency.NonZero(&buckets);
  AddLatencyCounts(buckets, update_latency.sum_ns(), &latency);
  out->Declare("sroute_controller_update_seconds", MetricType::kHistogram,
               "Time of a committed update, from its checks to its last "
               "commit")
      .AddHistogram({}, latency);
  out->Declare("sroute_controller_stats_reports_total", MetricType::kCounter,
               "Statistics reports received from hosts (one per host and "
               "interval)")
      .Add({}, static_cast<double>(stats_reports.load()));
  out->Declare("sroute_controller_apps", MetricType::kGauge,
               "Control applications running")
      .Add({}, static_cast<double>(Apps()->size()));
  AddRpcServerMetrics(rpc->counters(), out);
}

std::string Controller::metrics_address() const {
  return impl_->metrics_server ? impl_->metrics_server->address() : "";
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// What a host (sroute-fuse, sroute-server) exports at /metrics
// (--metrics HOST:PORT, config `metrics`), beside its daemon's own: the
// rules' counters and latency histograms, IOs unmatched and in flight, the
// endpoints' and stages' counters, and whether the controller is reached.
// docs/reference/metrics.md lists every family (ctest metrics_reference).
//
// Label cardinality is bounded: the `rule_cap` rules with the most IOs
// each have their series (labels rule_id, rule, owner); the others are
// added up into one series with rule_id="other", so that sums over rules
// stay exact whatever the table's size. Op labels are the op classes
// (read, write, other); endpoints and stages are few.
#ifndef SROUTE_HOST_HOST_METRICS_H_
#define SROUTE_HOST_HOST_METRICS_H_

#include <cstddef>

#include "metrics/exposition.h"
#include "rpc/server.h"
#include "sswitch/sswitch.h"

namespace sroute {

class ControllerAgent;

inline constexpr size_t kDefaultMetricsRuleCap = 100;

// Adds `sw`'s metrics to `out`; `agent` (may be null) adds the controller's
// connection. Cost: one pass over the rules' counters, and a histogram
// merge per exported rule.
void AddSwitchMetrics(const SSwitch& sw, size_t rule_cap,
                      const ControllerAgent* agent, metrics::Exposition* out);

// Adds a LatencyHistogram's buckets (LatencyHistogram::NonZero) and sum to
// `h` (bounds in seconds). A bucket's latencies are below its upper edge:
// counted at that edge, each lands in a bucket at most 1/8 above its own.
void AddLatencyCounts(const LatencyHistogram::Counts& buckets, uint64_t sum_ns,
                      metrics::HistogramData* h);

// An RPC server's connections and traffic (a storage server's, the
// controller's).
void AddRpcServerMetrics(const RpcServer::Counters& c,
                         metrics::Exposition* out);

}  // namespace sroute

#endif  // SROUTE_HOST_HOST_METRICS_H_

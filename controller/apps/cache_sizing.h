// SPDX-License-Identifier: Apache-2.0
// cache_sizing: the cache control application (docs/design.md §9.3). The hosts
// sample the blocks each tenant reads with SHARDS (the shards() delegate on
// the tenant's route); the app builds a miss-ratio curve per tenant from the
// samples, splits a total cache budget across the tenants to maximise the
// total hits (greedy on the curves' convex hulls, stages/cache/allocate.h),
// and resizes the tenants' partitions of a cache stage on one host, live.
// It repeats every interval.
//
//   sroute-controller --app cache_sizing:sswitch=fuse@h:/mnt,stage=cacheA,
//       budget=256M,tenants=alice+bob,files=//home/*,interval=10s
//
// Arguments (key=value, comma-separated):
//   sswitch   the host whose cache stage it sizes (required)
//   stage     the cache stage (default "cache"); added (partitioned by
//             tenant) if the host has none by that name
//   budget    total bytes to split (required; K, M, G suffixes)
//   tenants   the tenants, '+'-separated (required)
//   files     the pattern of files their routes cover (default //home/*)
//   rate      SHARDS sampling rate at the hosts (default 0.01)
//   max_keys  fixed-size SHARDS at the controller: at most this many
//             sampled keys per tenant (default 0: fixed rate)
//   block     the cache's block size (default 4096)
//   step      allocation granularity in bytes (default budget/64)
//   interval  seconds between resizes (default 10)
//
// At start it installs, with one consistent update, a route per tenant:
//   <TENANT, r|w, FILES> -> shards(rate=R, block=B); <IO, stage:STAGE>
// The curves (text, in the app's state as "mrc/TENANT") are what
// `sroutectl --controller ADDR cache mrc` prints.
#ifndef SROUTE_CONTROLLER_APPS_CACHE_SIZING_H_
#define SROUTE_CONTROLLER_APPS_CACHE_SIZING_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/app_api.h"
#include "stages/cache/allocate.h"
#include "stages/cache/shards.h"
#include "util/mutex.h"

namespace sroute {

struct CacheSizingOptions {
  std::string sswitch;
  std::string stage = "cache";
  uint64_t budget_bytes = 0;
  std::vector<std::string> tenants;
  std::string files = "//home/*";
  double rate = 0.01;
  size_t max_keys = 0;
  uint64_t block = 4096;
  uint64_t step_bytes = 0;  // 0: budget / 64
  absl::Duration interval = absl::Seconds(10);
};

absl::StatusOr<CacheSizingOptions> ParseCacheSizingArgs(
    const std::string& args);

// The app's logic without a controller: samples in, curves and a split
// out. Thread-safe.
class CacheSizer {
 public:
  explicit CacheSizer(CacheSizingOptions options);

  // A shards() sample of `tenant`'s route: keys sampled at `rate`, with
  // the route's cumulative reference count. Unknown tenants are ignored.
  void AddSample(const std::string& tenant, double rate, uint64_t refs,
                 const std::vector<uint64_t>& keys);

  // Each tenant's curve (bucket = the step, up to the budget) and the
  // references it stands for.
  std::map<std::string, TenantCurve> Curves() const;
  // The budget split (bytes per tenant, multiples of the step; what no
  // tenant gains from is left unassigned) and the hits it expects.
  std::map<std::string, uint64_t> Split(double* expected_hits = nullptr) const;
  const CacheSizingOptions& options() const { return options_; }
  uint64_t step_blocks() const;
  uint64_t budget_blocks() const {
    return options_.budget_bytes / options_.block;
  }

 private:
  struct Tenant {
    std::unique_ptr<ShardsSampler> sampler;  // fixed size only
    std::unique_ptr<MrcBuilder> builder;
    uint64_t refs = 0;
  };
  const CacheSizingOptions options_;
  mutable Mutex mu_;
  std::map<std::string, Tenant> tenants_ ABSL_GUARDED_BY(mu_);
};

// A curve as text: "SIZE_BYTES MISS_RATIO" a line, after a header line
// "# tenant T references N block B".
std::string FormatCurve(const std::string& tenant, const TenantCurve& curve,
                        uint64_t block);

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_APPS_CACHE_SIZING_H_

// SPDX-License-Identifier: Apache-2.0
// TokenScheduler: the request scheduler of the `qos` stage (issue 48), after
// the QoS scheduler of ReFlex (Klimovic et al., ASPLOS'17, §3.2): a FIFO
// queue per tenant, a cost in tokens per request, latency-critical (LC)
// tenants with a reserved token rate, best-effort (BE) tenants sharing what
// the LC tenants leave. It has no thread and no clock: every call says what
// time it is, so tests script the clock and the stage decides when to call.
//
//   TokenScheduler s;
//   s.SetDevice({.tokens_per_s = 8400, .write_cost = 10}, now);
//   s.SetTenant({.name = "a", .cls = QosClass::kLatencyCritical,
//                .reserved_iops = 2400, .read_fraction = 1,
//                .p95_slo = absl::Milliseconds(25)}, now);
//   s.Enqueue("a", {.cookie = id, .op = QosOp::kRead, .length = 4096}, now);
//   std::vector<QosRequest> go;
//   s.Schedule(now, &go);            // submit `go` to the device, in order
//   wake_at = s.NextWake(now);       // and call Schedule again by then
//   ...
//   s.Complete("a", QosOp::kRead, 4096, latency, now);  // counters only
//
// Thread safety: thread-compatible. The caller serializes every call (the
// stage holds a mutex); const methods may run together. `now` must not go
// backwards: an earlier time than one already seen counts as that one.
//
// The model:
//  - Cost: max(1, ceil(length / 4 KiB)) x C(op) tokens. C(read) = 1, or
//    `read_only_read_cost` (ReFlex's device A: 0.5) when `read_only_discount`
//    is set and the last 64 reads and writes dispatched were all reads
//    (ReFlex's read-only curve: the device serves more reads when nothing
//    writes). C(write) = `write_cost`. kOther (metadata, fsync) costs 1
//    token whatever its length and leaves the read ratio alone.
//  - The device makes `tokens_per_s` tokens/s: the weighted IOPS it serves
//    at the strictest LC tenant's p95 SLO (calibration says which).
//  - The round period P is 5 % of the strictest LC p95_slo (1 ms when no LC
//    tenant states one): the longest the caller may leave between Schedule
//    calls while requests wait (NextWake), and the length of a "round" for
//    the LC surplus cap.
//  - An LC tenant earns reserved_iops x (read_fraction + (1 - read_fraction)
//    x write_cost) tokens/s (the read cost undiscounted: reservations stay
//    valid whatever the mix). Its request goes when the balance after it
//    stays >= deficit_floor; one costing more than -deficit_floor (it could
//    never go so) goes when the balance is >= 0. Each time a queued request
//    has to wait for its tenant's tokens counts a deficit-floor hit. The
//    balance is capped at surplus_rounds x P x rate; of what an LC tenant
//    earns above the cap (busy or idle), donate_fraction goes to the global
//    bucket and the rest is dropped.
//  - BE tenants with queued requests share equally the unreserved rate
//    (tokens_per_s - the LC rates, >= 0), earned continuously while queued,
//    and the global bucket: each Schedule call adds what the bucket holds to
//    their shares (ReFlex lets the tenant served first draw on it, which
//    favours whoever waits longest: the tenant with the costliest requests).
//    A BE tenant whose queue empties gives its balance to the bucket and
//    starts again from 0 (no hoarding while idle). They are served from a
//    ring: the tenant at the cursor dispatches what it can afford and the
//    cursor moves on; a tenant that can afford nothing stops the walk and
//    keeps its turn (it earns like the others meanwhile, so waiting costs it
//    nothing, and a walk never visits tenants that cannot go).
//  - A round: every BE tenant that was in the ring when the round began has
//    had its turn (tenants that join wait for the next round). At its end
//    the bucket is reset (what tenants that left gave back and nobody took)
//    and the next round starts one tenant further round the ring, so no
//    tenant is always first at the device. While no BE tenant has queued
//    requests, every Schedule call ends a round.
//  - Work conservation: while no BE tenant has queued requests, the
//    unreserved rate goes to the bucket, and LC tenants waiting at their
//    floor draw from it. Of the time since the last call, only the last two
//    round periods bring the bucket income (a caller that sleeps long gets
//    no burst when it wakes). LC rates above the device's leave BE tenants
//    nothing (admission control is the controller's job). With no LC
//    tenant, or tokens_per_s == 0 (uncalibrated), nothing is limited: every
//    queued request goes at the next Schedule (the rate only exists to keep
//    LC SLOs).
//  - Counters per tenant: IOPS (completions over the last second), bytes,
//    latency percentiles over the last 5 to 10 s of completions (a histogram
//    of 8 buckets per octave; a percentile is its bucket's upper edge, at
//    most 12.5 % above the truth, never below), the balance, tokens spent,
//    deficit-floor hits, queue length, dispatched and completed counts.
//  - Cost: Enqueue and Schedule do O(1) work per request plus O(log n) per
//    LC tenant served (a heap orders waiting LC tenants by when they can go;
//    idle LC tenants donate through one aggregate rate); nothing walks all
//    tenants. SetTenant, RemoveTenant and SetDevice take O(tenants).
#ifndef SROUTE_STAGES_QOS_TOKEN_SCHEDULER_H_
#define SROUTE_STAGES_QOS_TOKEN_SCHEDULER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace sroute {

enum class QosClass { kLatencyCritical, kBestEffort };

enum class QosOp : uint8_t { kRead, kWrite, kOther };

struct QosTenantSpec {
  std::string name;
  QosClass cls = QosClass::kBestEffort;
  // LC only: IOPS reserved (4 KiB requests) at this share of reads.
  double reserved_iops = 0;
  double read_fraction = 1;
  // LC only: the p95 latency target; zero when none is stated.
  absl::Duration p95_slo = absl::ZeroDuration();
};

struct QosDeviceParams {
  double tokens_per_s = 0;  // 0: uncalibrated, nothing is limited
  double write_cost = 10;   // C(write) in read tokens
  bool read_only_discount = false;
  double read_only_read_cost = 0.5;  // C(read) while reads only
  double deficit_floor = -50;        // tokens, <= 0
  int surplus_rounds = 3;
  double donate_fraction = 0.9;
};

struct QosRequest {
  uint64_t cookie = 0;  // the caller's: comes back in Schedule's output
  QosOp op = QosOp::kRead;
  uint64_t length = 0;  // bytes
};

struct QosTenantStats {
  std::string name;
  QosClass cls = QosClass::kBestEffort;
  double token_rate = 0;  // LC: reserved tokens/s; BE: its share now
  double tokens = 0;      // the balance now
  double tokens_spent = 0;
  uint64_t deficit_floor_hits = 0;
  uint64_t queued = 0;
  uint64_t enqueued = 0;  // requests that arrived (its demand)
  uint64_t dispatched = 0;
  uint64_t completed = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  double iops = 0;
  absl::Duration p50 = absl::ZeroDuration();
  absl::Duration p95 = absl::ZeroDuration();
  absl::Duration p99 = absl::ZeroDuration();
};

struct QosDeviceStats {
  bool limited = false;  // tokens_per_s > 0 and an LC tenant exists
  double tokens_per_s = 0;
  double lc_reserved_rate = 0;
  double unreserved_rate = 0;
  absl::Duration round_period;
  bool read_only = false;  // reads cost read_only_read_cost now
  uint64_t be_queued_tenants = 0;
  double bucket = 0;
  double lc_donated = 0;    // tokens LC tenants gave the bucket
  double lc_dropped = 0;    // and the share of their surplus dropped
  double bucket_reset = 0;  // tokens the bucket lost at round ends
  uint64_t be_rounds = 0;
};

class TokenScheduler {
 public:
  TokenScheduler();
  ~TokenScheduler();
  TokenScheduler(const TokenScheduler&) = delete;
  TokenScheduler& operator=(const TokenScheduler&) = delete;

  // What SetTenant and SetDevice refuse, and why.
  static absl::Status CheckTenant(const QosTenantSpec& spec);
  static absl::Status CheckDevice(const QosDeviceParams& device);
  // The tokens/s an LC tenant's reservation needs (admission control).
  static double LcTokenRate(const QosTenantSpec& spec, double write_cost);

  // Changes the device's parameters; rates follow at once.
  absl::Status SetDevice(const QosDeviceParams& device, absl::Time now);
  // Adds a tenant or changes one (its queue stays; a change of class starts
  // its balance again from 0).
  absl::Status SetTenant(const QosTenantSpec& spec, absl::Time now);
  // Forgets a tenant and appends its queued requests, never dispatched, to
  // `orphaned`; false if there is no such tenant.
  bool RemoveTenant(std::string_view name, absl::Time now,
                    std::vector<QosRequest>* orphaned);

  // Queues a request at the tail of its tenant's queue. A tenant not set
  // before is added as BE with default settings (unregistered traffic is
  // best effort); RemoveTenant forgets it again.
  void Enqueue(std::string_view tenant, const QosRequest& request,
               absl::Time now);
  // Appends to `dispatch`, in order, the requests that may go now.
  void Schedule(absl::Time now, std::vector<QosRequest>* dispatch);
  // When Schedule should run again if nothing is enqueued before: no later
  // than now + the round period while requests wait; InfiniteFuture() when
  // none does.
  absl::Time NextWake(absl::Time now) const;
  // Counts a completed request (unknown tenants are ignored).
  void Complete(std::string_view tenant, QosOp op, uint64_t bytes,
                absl::Duration latency, absl::Time now);

  // A request's cost at the device's read ratio now.
  double RequestCost(QosOp op, uint64_t length) const;
  double DeviceRate() const { return device_.tokens_per_s; }
  // The tokens/s that the LC tenants' reservations take.
  double LcReservedRate() const { return lc_rate_sum_; }
  absl::Duration RoundPeriod() const { return round_; }
  const QosDeviceParams& device() const { return device_; }
  uint64_t queued() const { return queued_; }

  std::optional<QosTenantStats> Stats(std::string_view tenant,
                                      absl::Time now) const;
  std::vector<QosTenantStats> AllStats(absl::Time now) const;  // by name
  QosDeviceStats DeviceStats() const;

 private:
  struct Tenant;
  struct LcEntry {  // an LC tenant with queued requests, by when it can go
    absl::Time at;
    uint64_t seq;
    Tenant* tenant;
  };
  struct FillEntry {  // an idle LC tenant, by when it reaches its cap
    absl::Time at;
    uint64_t seq;
    Tenant* tenant;
  };

  bool Limited() const;
  double ReadCost() const;
  Tenant* FindOrAdd(std::string_view name, absl::Time now);
  // Brings the BE share, the idle LC donations and the bucket up to `now`;
  // returns `now`, or the latest time seen if that is later.
  absl::Time AdvanceTo(absl::Time now);
  void Donate(double tokens);
  void Dispatch(Tenant* t, double cost, bool charge,
                std::vector<QosRequest>* dispatch);
  void DrainAll(std::vector<QosRequest>* dispatch);

  // LC tenants.
  double LcNeed(double cost) const;
  void SettleLc(Tenant* t, absl::Time now);
  void WakeLc(Tenant* t, absl::Time now);
  void IdleLc(Tenant* t);
  void QueueLc(Tenant* t, absl::Time now, bool count_hit);
  absl::Time LcReady(const Tenant* t, absl::Time now) const;
  void ServeLcFromBucket(absl::Time now, std::vector<QosRequest>* dispatch);
  // Settle every LC tenant under the old parameters, then (after they
  // change) recompute rates, caps and the heaps under the new ones.
  void FreezeLc(absl::Time now);
  void RebuildLc(absl::Time now);

  // BE tenants.
  void RingInsert(Tenant* t);
  void RingRemove(Tenant* t, bool in_its_turn);
  void ServeBe(std::vector<QosRequest>* dispatch);
  void EndRound();

  QosDeviceParams device_;
  absl::flat_hash_map<std::string, std::unique_ptr<Tenant>> tenants_;
  uint64_t queued_ = 0;
  uint64_t seq_ = 0;
  absl::Time advanced_ = absl::InfinitePast();  // AdvanceTo's last `now`
  int reads_in_a_row_ = 0;                      // dispatched, for C(read)

  size_t lc_count_ = 0;
  double lc_rate_sum_ = 0;
  double unreserved_ = 0;
  absl::Duration round_;
  std::vector<LcEntry> lc_heap_;      // min-heap on (ready, seq)
  std::vector<FillEntry> fill_heap_;  // min-heap on (at, seq)
  double donor_rate_ = 0;             // Σ rate of idle LC tenants at cap
  size_t donors_ = 0;

  Tenant* cursor_ = nullptr;  // the BE ring: tenants with queued requests
  size_t ring_size_ = 0;
  size_t round_left_ = 0;  // turns left in this round
  uint64_t rounds_ = 0;
  double be_vtime_ = 0;  // tokens each queued BE tenant has earned so far

  double bucket_ = 0;
  double lc_donated_ = 0;
  double lc_dropped_ = 0;
  double bucket_reset_ = 0;
};

}  // namespace sroute

#endif  // SROUTE_STAGES_QOS_TOKEN_SCHEDULER_H_

// SPDX-License-Identifier: Apache-2.0
// Slow-op capture (sroute-trace --slow): the IOs whose time at an sSwitch,
// from their first rule's start to their reply, reached a threshold. Kept
// apart from sampled traces, so fast IOs never push them out: the last
// kRecent slow IOs and the kTop longest since the log was cleared; `total`
// counts every slow IO and `overwritten` those the recent ring let go
// (some of which the top list still holds). Memory is capped: at most
// kRecent + kTop records, each with at most Trace::kMaxHops hops.
//
//   SlowOpLog log;
//   log.set_threshold_ns(100'000'000);       // 100 ms; 0 turns it off
//   if (dur >= log.threshold_ns()) log.Add(std::move(record));
//   SlowOpLog::View v = log.Get(/*after=*/0);
//
// Thread safety: thread-safe; threshold_ns() is one relaxed load (the IO
// path reads it for every IO that took a rule).
#ifndef SROUTE_SSWITCH_SLOW_OPS_H_
#define SROUTE_SSWITCH_SLOW_OPS_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "rules/io_header.h"
#include "sswitch/trace.h"
#include "util/mutex.h"

namespace sroute {

struct SlowIo {
  uint64_t seq = 0;  // from 1, in the order they completed
  IoHeader header;
  uint64_t rule_id = 0;  // the first rule that routed it
  uint64_t start_ns = 0, end_ns = 0;
  absl::StatusCode code = absl::StatusCode::kOk;
  std::vector<TraceHop> hops;  // if it was traced too
};

class SlowOpLog {
 public:
  static constexpr size_t kRecent = 256;
  static constexpr size_t kTop = 32;
  static constexpr uint64_t kDefaultThresholdNs = 500'000'000;  // 500 ms

  uint64_t threshold_ns() const {
    return threshold_ns_.load(std::memory_order_relaxed);
  }
  void set_threshold_ns(uint64_t ns) {
    threshold_ns_.store(ns, std::memory_order_relaxed);
  }

  void Add(SlowIo io) ABSL_LOCKS_EXCLUDED(mu_);

  struct View {
    std::vector<SlowIo> recent;  // seq > after, oldest first
    std::vector<SlowIo> top;     // longest first
    uint64_t total = 0;          // slow IOs since the sSwitch started
    uint64_t overwritten = 0;
    uint64_t threshold_ns = 0;
  };
  View Get(uint64_t after) const ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets every record; `total` and the sequence numbers go on.
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  std::atomic<uint64_t> threshold_ns_{kDefaultThresholdNs};
  mutable Mutex mu_;
  std::deque<SlowIo> recent_ ABSL_GUARDED_BY(mu_);
  std::vector<SlowIo> top_ ABSL_GUARDED_BY(mu_);  // a min-heap by duration
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t overwritten_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_SLOW_OPS_H_

// SPDX-License-Identifier: Apache-2.0
// Tracing one IO along its path (docs/design.md §8, tracer; sroute-trace).
//
// An IO sampled at its first sSwitch (a rule's `trace(rate)` delegate
// decides) carries a Trace; every sSwitch, stage and RPC hop it then
// crosses adds a TraceHop: where the IO was, from when to when on that
// host's monotonic clock, and how it ended. A storage server traces the IO
// it is sent and returns its hops with the reply, one level deeper; the
// sSwitch that sampled the IO ends up with its whole path. No clocks are
// compared across hosts: a link's latency is the caller's rpc segment less
// the callee's segments.
//
//   Trace t;
//   t.Add(TraceHop{...});             // from any thread
//   std::vector<TraceHop> hops = t.Hops();
//
// Memory: at most kMaxHops hops per IO (more are counted in dropped()).
//
// Thread safety: thread-safe (the pieces of a split or scattered IO add
// their hops concurrently).
#ifndef SROUTE_SSWITCH_TRACE_H_
#define SROUTE_SSWITCH_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "util/mutex.h"

namespace sroute {

struct TraceHop {
  std::string host;  // the sSwitch that measured it
  std::string kind;  // "rule", "default", "stage", "rpc", "park"
  uint64_t rule_id = 0;
  std::string next;       // a file, stage:NAME, a server's address
  uint64_t start_ns = 0;  // monotonic, of `host`
  uint64_t end_ns = 0;
  uint32_t depth = 0;  // hops a server sent back are one deeper
  int32_t copy = -1;   // scatter copy or split piece; -1: the IO itself
  absl::StatusCode code = absl::StatusCode::kOk;
};

class Trace {
 public:
  static constexpr size_t kMaxHops = 64;

  void Add(TraceHop hop) ABSL_LOCKS_EXCLUDED(mu_);
  // Adds the hops another host sent back for a call and then the call's
  // own hop, with no other hop between them: in Hops(), a hop of kind
  // "rpc" at depth d owns the run of deeper hops just before it.
  void AddCall(std::vector<TraceHop> inner, TraceHop call)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The hops so far, in the order they ended (a hop inside another ends
  // first).
  std::vector<TraceHop> Hops() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t dropped() const ABSL_LOCKS_EXCLUDED(mu_);
  // The hops, moved out: for the last reader, once no hop can be added.
  std::vector<TraceHop> TakeHops() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  std::vector<TraceHop> hops_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_TRACE_H_

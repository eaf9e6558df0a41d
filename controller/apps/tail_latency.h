// SPDX-License-Identifier: Apache-2.0
// tail_latency: burst off-loading and reclaim (sRoute §3.4 and §5.1,
// after Everest; docs/design.md §9.1).
//
// A flow is a managed rule of a FUSE host that sends a file (or a prefix
// of files) with its writes to one file on a storage server:
//   <SRC, OPS, //home/vol/*> -> <IO, //S1/vol/*>
// Every stats interval the app sums each server's demand, the IOs per
// second of the flows homed on it, and keeps a long-run average of it
// (an exponential average over `window`, begun by the server's second
// interval with demand: a flow that starts on an idle server, part way
// through an interval, is no burst; it stands still while the server's
// flows are off-loaded, so that the burst does not become the norm). When a
// server's demand passes `alpha` times its long-run average (and `min_ops`),
// and another server the host reaches serves less than the burst divided by
// `alpha` (and neither bursts itself nor has its own flows away), the app
// off-loads the writes of the server's hottest flows (by writes in the
// interval, `flows` of them) to temporary files on the least loaded such
// server (the bursts of one report one after the other, each counting the
// writes those before it sent to their targets):
//   @P+1 <SRC, w, //home/vol/*> -> track_writes(); <IO,
//   //S2/.sroute-tl-G/vol/*>
// and reads of every byte written there follow it (track_writes's read
// rules, durable through the delegate records on S2). With `spread` above
// 1, the writes go to up to that many such servers, each 1 MiB chunk of a
// file to one of them (track_writes(spread)).
//
// When the demand falls below `end` times the long-run average, and the
// off-load has lasted `hold`, the app reclaims: one consistent update
// replaces the off-load rule with
//   @P+1 <SRC, w, //home/vol/*> -> track_writes(home); <IO, //S1/vol/*>
// (new writes go home and retire the ranges they cover), then the host
// rewrites every range still away through its rules, a chunk at a time
// with the applications' writes to it held (proto/hostctl.proto Copy
// RECLAIM, at `rate` bytes per second), the servers drop the records,
// the home rule goes and the temporary folder is removed. The server is
// left alone for `cooldown` after that.
//
// Every decision is logged with its reason, and kept (the last 32) in the
// app's state "decisions"; the flows under way are in its state "flows",
// from which a restarted controller goes on where it stopped. A crash of
// any process loses no acknowledged write: the rules are the controller's,
// the read rules come back from the records, and each step above can run
// again.
//
//   sroute-controller --app tail_latency:alpha=2,end=1.2,window=60
//
// Arguments (key=value, comma-separated):
//   alpha     burst factor over the long-run average (default 2)
//   end       the burst is over below end x the long-run average (1.2)
//   window    seconds the long-run average spans (default 60)
//   min_ops   IOs per second below which no server bursts (default 50)
//   hold      seconds an off-load lasts at least (default 10)
//   cooldown  seconds after a reclaim before the server off-loads again
//             (default 10)
//   rate      reclaim bytes per second (default 32M)
//   chunk     bytes a reclaim moves at once (default 64K)
//   flows     flows off-loaded per burst (default 1)
//   spread    the most servers one flow's writes go to (default 1)
//   queue     IOs in flight on a server's flows at which it bursts, whatever
//             its rate (default 32; 0: rates only); a burst does not end
//             while half as many are in flight
//   hosts     '+'-separated FUSE sSwitches (default: every host)
#ifndef SROUTE_CONTROLLER_APPS_TAIL_LATENCY_H_
#define SROUTE_CONTROLLER_APPS_TAIL_LATENCY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/app_api.h"

namespace sroute {

struct TailLatencyOptions {
  double alpha = 2;
  double end = 1.2;
  absl::Duration window = absl::Seconds(60);
  double min_ops = 50;
  absl::Duration hold = absl::Seconds(10);
  absl::Duration cooldown = absl::Seconds(10);
  uint64_t rate_bytes_per_s = 32 << 20;
  // The reclaim's unit: the bytes of a range held from new writes and
  // written home at once (a smaller one stalls the flow's IOs less).
  uint64_t chunk_bytes = 64 << 10;
  int flows = 1;
  // The most servers a flow's writes spread over (track_writes(spread)):
  // a burst bigger than one server's headroom goes to several.
  int spread = 1;
  // IOs in flight on a server's flows at which it bursts whatever its rate
  // (a choked server completes few IOs: its rate alone says too little);
  // 0: rates only.
  int64_t queue = 32;
  std::vector<std::string> hosts;  // empty: every host
  // The time (tests run the app on a clock of their own); empty: the
  // controller's (ControllerApi::Now).
  std::function<absl::Time()> clock;
};

absl::StatusOr<TailLatencyOptions> ParseTailLatencyArgs(
    const std::string& args);

class TailLatency : public ControlApp {
 public:
  explicit TailLatency(TailLatencyOptions options);

  absl::Status Start(ControllerApi& api) override;
  void OnStats(const StatsSnapshot& stats) override;

  // A flow the app moved, and how far.
  struct Moved {
    enum class Phase { kAway, kReclaiming };
    Phase phase = Phase::kAway;
    std::string sswitch;  // the FUSE host
    std::string flow;     // the flow rule's text
    std::string server;   // its home server's endpoint name
    // The servers its writes went to, and the folder on each
    // ("//T/.sroute-tl-G"); saved comma-separated.
    std::vector<std::string> targets;
    std::vector<std::string> folders;
    std::string away_rule, home_rule;
    absl::Time since;
    // The home server's long-run demand when the burst began (ops/s): the
    // burst is over below `end` times it, also after a restart.
    double long_run = 0;
    // The reclaim's progress in this life (for its report, not saved).
    absl::Time reclaim_began = absl::InfinitePast();
    uint64_t reclaimed_bytes = 0;
  };

 private:
  struct Server {
    // ops/s; -1 until its second interval with demand (the first may have
    // begun part way through: a flow starting on an idle server must not
    // look like a burst over a long-run 0)
    double long_run = -1;
    bool had_demand = false;  // an interval with demand came
    double recent = 0;        // demand in the last interval, ops/s
    double served = 0;        // what it served in the last interval, ops/s
    int64_t queued = 0;       // its flows' IOs in flight at the last report
    absl::Time quiet_until = absl::InfinitePast();
  };
  struct Flow {
    std::string sswitch;
    std::string text;  // canonical
    int priority = 0;
    std::string server;         // endpoint name of its target
    std::string target;         // its target file pattern, "//S1/vol/*"
    std::string write_pattern;  // its pattern for writes: "<SRC, w, FILE>"
    double writes = 0;          // per second, last interval
  };

  // What one stats report says, for the decisions it leads to.
  struct Interval {
    std::map<std::string, std::set<std::string>> reach;  // by sswitch
    std::set<std::string> names;  // every server some host reaches
    std::vector<Flow> flows;
    double secs = 1;  // the report's interval
  };

  absl::Time Now() const;
  void Decide(const StatsSnapshot& stats);
  Interval Measure(const StatsSnapshot& stats);
  void EndOffLoads(absl::Time now);
  void OffLoadBursts(const Interval& in, absl::Time now);
  void UpdateLongRun(const Interval& in);
  absl::Status OffLoad(const Flow& flow,
                       const std::vector<std::string>& targets,
                       const std::string& reason);
  // One step of a reclaim (or of finishing one); true when it is done.
  bool StepReclaim(Moved& m);
  absl::Status BeginReclaim(Moved& m, const std::string& reason);
  absl::Status ReplaceRule(const std::string& sswitch,
                           const std::string& insert,
                           const std::string& remove);
  void Note(const std::string& decision);
  void Save();

  const TailLatencyOptions options_;
  ControllerApi* api_ = nullptr;
  std::map<std::string, Server> servers_;  // by endpoint name
  std::vector<Moved> moved_;
  std::deque<std::string> decisions_;
  uint64_t generation_ = 0;
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_APPS_TAIL_LATENCY_H_

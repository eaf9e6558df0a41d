// SPDX-License-Identifier: Apache-2.0
// replica_control: the replica-set control application (docs/design.md §9.2).
// A read-only flow of a replica_set stage reads from every member (its
// stage flow's read policy is `spread`), which spreads the load; a write
// to it would let a reader see a member that has the write and then one
// that does not yet have it. So while a flow spreads, its writes are
// detoured to the controller (<*, w, FLOW> -> <IO, controller>), and the
// first one waits for its turn while the app sets the flow's reads back to
// the primary on every host that has the stage (each host parks the
// stage's IOs and waits for the reads under way: a stage change), then goes
// on; the detour is then removed with one consistent update. After `idle`
// seconds without a write, the flow spreads again: the detour first (a
// consistent update that drains the flow's writes everywhere), then the
// spread reads. So no read that begins after another read returned a
// write's bytes returns bytes older than them, on any host.
//
//   sroute-controller --app replica_control:stage=rs,flows=//home/rep/*,idle=10
//
// Arguments (key=value, comma-separated):
//   flows     the flows, '+'-separated: a file //HOST/PATH or a prefix
//             //HOST/PATH* (required)
//   stage     the replica_set stage, by name, on every connected host that
//             has one (default "rs")
//   spread    the read policy of a spreading flow: least_loaded (default),
//             random, weighted or hedged
//   idle      seconds without a write before a flow spreads (default 10)
//   priority  of the app's rules, above the routes they steer (default
//             1000)
//
// Per host and flow the app keeps one rule above the others: in primary
// mode  @P <*, w, FLOW> -> <IO, stage:STAGE>   (its counters tell writes)
// spread       @P <*, w, FLOW> -> <IO, controller>
// and the hand-back of the detoured writes, kept in both modes:
//              @P <stage:controller, w, FLOW> -> <IO, stage:STAGE>
// The flow's writes thus go to the stage directly: the stage must be where
// the flow's own route sends them.
//
// A host that cannot be switched back (it does not answer) keeps the
// write waiting, and the write fails with its host's detour timeout: a
// write is refused rather than let a reader go back in time. When the set
// of hosts with the stage changes (at start too), every flow goes back to
// the primary, and spreads after `idle` again.
#ifndef SROUTE_CONTROLLER_APPS_REPLICA_CONTROL_H_
#define SROUTE_CONTROLLER_APPS_REPLICA_CONTROL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/app_api.h"
#include "util/mutex.h"

namespace sroute {

struct ReplicaControlOptions {
  std::vector<std::string> flows;
  std::string stage = "rs";
  std::string spread = "least_loaded";
  absl::Duration idle = absl::Seconds(10);
  int32_t priority = 1000;
};

absl::StatusOr<ReplicaControlOptions> ParseReplicaControlArgs(
    const std::string& args);

class ReplicaControl : public ControlApp {
 public:
  explicit ReplicaControl(ReplicaControlOptions options);

  absl::Status Start(ControllerApi& api) override;
  void OnStats(const StatsSnapshot& stats) override;
  void OnIoTurn(const HeaderEvent& event, std::function<void()> go) override;

 private:
  enum class Mode {
    kUnknown,    // at start: what hosts do is not known
    kPrimary,    // reads from the primary; writes go straight on
    kSpreading,  // writes detoured; reads being spread
    kSpread,     // reads from every member; writes detoured
  };
  struct Flow {
    std::string file;  // "//HOST/PATH" or "//HOST/PATH*"
    Mode mode = Mode::kUnknown;
    // Turns of writes waiting for the flow to read from the primary.
    std::vector<std::function<void()>> held;
    bool to_primary_posted = false;
    bool rules_pending = false;  // primary, but the detours are not gone
    absl::Time quiet_since;      // the last write seen, or the switch
    std::map<std::string, uint64_t> counting;  // host -> primary rule cid
  };

  bool Covers(const Flow& f, const std::string& file) const;
  // Each runs on the app's thread.
  void ToPrimary(size_t flow, const std::string& reason);
  void ToSpread(size_t flow);
  // Sets `flow`'s read policy in the stage of `sswitch`.
  absl::Status SetStageFlow(const std::string& sswitch, const std::string& file,
                            const std::string& read);
  // Replaces the app's rules of `flow` on every host by the mode's.
  absl::Status InstallRules(size_t flow, bool spread);
  std::string Rule(const std::string& source, const std::string& file,
                   const std::string& target) const;

  const ReplicaControlOptions options_;
  // Set by Start, on the app's thread; OnIoTurn may come before it (a
  // host with a detour from an earlier run of the controller).
  std::atomic<ControllerApi*> api_{nullptr};
  ControllerApi* api() const { return api_.load(std::memory_order_acquire); }
  // The hosts with the stage (app thread only).
  std::set<std::string> hosts_;
  // Guards flows_' modes and held turns (OnIoTurn runs on controller
  // threads). A leaf: no call to the controller under it.
  Mutex mu_;
  std::vector<Flow> flows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_APPS_REPLICA_CONTROL_H_

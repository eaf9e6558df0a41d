// SPDX-License-Identifier: Apache-2.0
// steering: Sandook's controller (NSDI'26 §6.2, §7) for replica sets whose
// members differ (issue 49). Every epoch (200 ms) it reads each steered
// replica set's load (reads and changes per second, from the stage's
// counters), computes each member's share of the reads from the members'
// load-latency profiles, and pushes the shares as the stage's read weights,
// live (no quiesce). Clients react to congestion in between on their own
// (the stage's AIMD, from replies the devices' hosts mark).
//
//   sroute-controller --app steering
//   sroutectl --controller C profile store S1 s1.txt --on S1 --endpoint ssd
//   sroutectl --controller C stages set --host fuse@h:/mnt rs steer=sandook
//   sroutectl --controller C steer status
//
// A stage is steered by the policy in its `steer` option:
//  - sandook: shares by hill-climbing on the members' expected latency (the
//    profile's p90 at the load the share gives them, the writes every
//    member takes counted in), levelling it; in proportion to peak IOPS
//    once the demand reaches 95 % of what the members peak at;
//  - reflex: shares in proportion to each member's peak IOPS at the set's
//    read/write mix (static weights, ReFlex's);
//  - gimbal, fds: nothing to compute (the stage weighs evenly, or hashes).
// A set with placement anywhere (sandook, swan) also gets its write-mode
// window (write_member, write_weight): the fewest members, at least
// `copies`, whose write capacity within the target covers the writes
// times `copies`, sliding one member around the ring every epoch (wear);
// reads are weighed over the others (swan: evenly).
// A member without a profile leaves its stage alone (said in the status).
//
// Profiles are the app's state (the controller's store): `profile-put`
// stores one under the member's name with the host and endpoint of its
// device, and sets it there as the device's congestion watch (again
// whenever the host's stats show no watch on it: a restarted host).
//
// Arguments (key=value, comma-separated): epoch_ms (default 200),
// target_us (default 1000), percentile (p50, p90, p99; default p90), move
// (a weight changes when a share moves by this much, default 0.01),
// threshold_percent (the watches': congested this far above the profile,
// default 10; more where latency is noisy, as on emulated devices),
// max_baseline_percent (the watches' learned calm latency at most this
// share of the profile's, default 100: the profile alone).
#ifndef SROUTE_CONTROLLER_APPS_STEERING_H_
#define SROUTE_CONTROLLER_APPS_STEERING_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/app_api.h"
#include "proto/config.pb.h"
#include "stages/steering/planner.h"

namespace sroute {

struct SteeringAppOptions {
  uint32_t epoch_ms = 200;
  double target_us = 1000;
  Percentile percentile = Percentile::kP90;
  double move = 0.01;
  uint32_t threshold_percent = 10;      // of the hosts' congestion watches
  uint32_t max_baseline_percent = 100;  // of the watches
};

absl::StatusOr<SteeringAppOptions> ParseSteeringArgs(const std::string& args);

// One member's share of a steered stage's reads, and what it expects.
struct MemberPlan {
  std::string member;
  double share = 0;
  double expected_us = 0;   // the profile's at the share's load (0: none)
  bool write_mode = false;  // placement anywhere: in the write window
};

// The shares of `policy` (sandook or reflex) for a replica set whose
// members have `profiles` (one each, in member order), at `read_iops`
// reads and `change_iops` changes per second (every member takes each
// change). `fallback` says the demand is past 95 % of the members' peaks.
// `capacity_share` (one per member, or empty: all 1): the share of its
// profile's capacity each has now (SteeringDevice::capacity_share).
std::vector<MemberPlan> PlanReplicaSet(
    const std::string& policy, const std::vector<std::string>& members,
    const std::vector<std::shared_ptr<const Profile>>& profiles,
    double read_iops, double change_iops, const SteeringAppOptions& options,
    bool* fallback, const std::vector<double>& capacity_share = {});

class SteeringApp : public ControlApp {
 public:
  explicit SteeringApp(SteeringAppOptions options);

  absl::Status Start(ControllerApi& api) override;
  void OnStats(const StatsSnapshot& stats) override;
  absl::StatusOr<proto::AppAnswer> OnCall(const proto::AppCall& call) override;

 private:
  // A steered stage: the replica_set `stage` of host `sswitch`.
  using StageKey = std::pair<std::string, std::string>;
  struct StageState {
    proto::StageConfig config;
    // Counters at the last epoch: member reads, changes; and when.
    std::map<std::string, int64_t> reads;
    int64_t changes = -1;
    absl::Time at;
    double read_iops = 0, change_iops = 0;
    std::vector<MemberPlan> plan;
    bool fallback = false;
    uint32_t epoch = 0;  // where the write window starts (it slides)
    std::string note;    // why it is not steered, if it is not
  };

  void Epoch();
  void SteerStage(const StageKey& key, StageState& st,
                  const proto::StageStats& now);
  absl::Status PushWatch(const proto::DeviceProfile& p);
  // Tells the hosts of the members that moved between read and write mode
  // (in `before`'s window and not in `after`'s, or the reverse): their
  // watches judge nothing for a millisecond (SetProfiles.mode_switched).
  void SwitchModes(const std::vector<std::string>& members,
                   const std::vector<std::string>& before,
                   const std::vector<std::string>& after);
  absl::Status SaveProfiles();
  absl::StatusOr<proto::AppAnswer> PutProfile(const proto::AppCall& call);
  absl::StatusOr<proto::AppAnswer> RemoveProfile(const proto::AppCall& call);
  proto::AppAnswer ListProfiles() const;
  proto::AppAnswer Status() const;

  const SteeringAppOptions options_;
  ControllerApi* api_ = nullptr;  // app thread only, as all below
  std::map<std::string, proto::DeviceProfile> profiles_;  // by member
  std::map<std::string, std::shared_ptr<const Profile>> parsed_;
  std::map<StageKey, StageState> stages_;
  absl::Duration last_epoch_cost_;
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_APPS_STEERING_H_

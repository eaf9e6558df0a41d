// SPDX-License-Identifier: Apache-2.0
// slo_admission: per-tenant latency SLOs on shared devices (issue 48), the
// control plane ReFlex (ASPLOS'17) leaves to "systems like sRoute". Each
// device is a `qos` stage (stages/qos/) in front of it on some host; the app
// owns the tenant lists of the stages its tenants name.
//
//   sroute-controller --app slo_admission
//   sroutectl --controller C qos register alice --class lc --iops 2400
//       --read-percent 100 --p95-us 5000 --stage q --on S1
//   sroutectl --controller C qos status
//
// Registration (`qos register`, AppCall "register"): a latency-critical
// (lc) tenant reserves IOPS at a read share with a p95 target on the qos
// stage `stage` of each sSwitch in `on`; a best-effort (be) tenant is only
// named. An lc registration is admitted only if, on every device, the
// reservations (in tokens: iops x (reads + writes x write_cost)) fit the
// device's rate at the strictest p95 target of its lc tenants (the stage's
// tokens_per_s, or its calibrated curve's rate at that target); otherwise
// it is refused, naming the device and the shortfall in tokens/s. A target
// stricter than a device's curve begins is refused too: nothing says the
// device can meet it. Admitted, every device's tenant list is pushed to its
// stage live (stages set: no quiesce), and re-pushed whenever a stage's
// options differ from the plan (a server restarted from its file).
//
// One tenant over several servers (dmClock's idea, beyond ReFlex): its
// reservation is split by each server's recent demand from it (the stage's
// TENANT.arrived counter; twice its share where its requests waited for
// tokens, TENANT.deficit_floor_hits), each server keeping at least
// `min_share` of it,
// within the capacity other tenants leave there; the split moves, every
// stats interval, once a share would change by `move` of the reservation or
// more, so the aggregate holds while the load moves between servers.
//
// A tenant that hits its deficit floor (it asks more than it reserved, or
// the device is slower than calibrated) in `report_after` intervals in a
// row is reported for renegotiation: a warning in the log, a decision
// (`sroutectl apps status slo_admission`), and `qos status`. Registrations
// are the app's state in the controller's store: back after a restart or a
// failover.
//
// Arguments (key=value, comma-separated): report_after (intervals, default
// 3), min_share (0..0.5, default 0.05), move (0..1, default 0.05).
#ifndef SROUTE_CONTROLLER_APPS_SLO_ADMISSION_H_
#define SROUTE_CONTROLLER_APPS_SLO_ADMISSION_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/app_api.h"
#include "proto/config.pb.h"

namespace sroute {

struct SloAdmissionOptions {
  int report_after = 3;
  double min_share = 0.05;
  double move = 0.05;
};

absl::StatusOr<SloAdmissionOptions> ParseSloAdmissionArgs(
    const std::string& args);

// A device: the qos stage `stage` of sSwitch `sswitch`.
using SloDevice = std::pair<std::string, std::string>;

struct SloTenant {
  std::string name;
  bool latency_critical = false;
  uint32_t iops = 0;  // lc: reserved, in 4 KiB requests
  uint32_t read_percent = 100;
  uint32_t p95_us = 0;
  std::string stage;
  std::vector<std::string> on;  // sSwitches
};

// One line a tenant (the app's state), and back.
std::string FormatSloTenants(const std::vector<SloTenant>& tenants);
absl::StatusOr<std::vector<SloTenant>> ParseSloTenants(const std::string& text);

// The plan for a set of registrations: each device's options and each lc
// tenant's IOPS share on each device.
struct SloPlan {
  struct Device {
    proto::QosOptions options;  // the stage's, with the tenant list planned
    double capacity = 0;        // tokens/s at the strictest target
    double reserved = 0;        // tokens/s the lc shares take
    uint32_t strictest_us = 0;  // 0: no lc tenant
  };
  std::map<SloDevice, Device> devices;
  std::map<std::string, std::map<SloDevice, double>> shares;  // IOPS
};

// Plans `tenants` on devices whose options now are `current` (every device a
// tenant names must be there). Tenants over one device are placed first,
// then the others in order, each split by `demand` (IOPS per device; none:
// evenly) with at least `min_share` of it per device, within what is free.
// FailedPrecondition, naming the tenant, the device(s) and the shortfall in
// tokens/s, when some reservation does not fit; InvalidArgument when a
// device has no rate or a target is stricter than its curve.
absl::StatusOr<SloPlan> PlanSlo(
    const std::vector<SloTenant>& tenants,
    const std::map<SloDevice, proto::QosOptions>& current,
    const std::map<std::string, std::map<SloDevice, double>>& demand,
    double min_share);

class SloAdmission : public ControlApp {
 public:
  explicit SloAdmission(SloAdmissionOptions options);
  absl::Status Start(ControllerApi& api) override;
  void OnStats(const StatsSnapshot& stats) override;
  absl::StatusOr<proto::AppAnswer> OnCall(const proto::AppCall& call) override;

 private:
  absl::StatusOr<proto::AppAnswer> Register(const proto::AppCall& call);
  absl::StatusOr<proto::AppAnswer> Unregister(const proto::AppCall& call);
  proto::AppAnswer List() const;
  proto::AppAnswer Status() const;
  // The qos options now of every device `tenants` name (asked of their
  // hosts).
  absl::StatusOr<std::map<SloDevice, proto::QosOptions>> CurrentOptions(
      const std::vector<SloTenant>& tenants) const;
  // Each spanning tenant's demand per device (IOPS) over the last interval:
  // what arrived, or twice its share where its requests waited for tokens.
  std::map<std::string, std::map<SloDevice, double>> Demand() const;
  // Plans `tenants`, pushes the plan, and keeps both (and the state).
  absl::Status Adopt(std::vector<SloTenant> tenants);
  // Sends each device whose options differ from the plan its planned ones.
  void Push(const std::map<SloDevice, proto::QosOptions>& now);
  void Decide(const std::string& line);

  const SloAdmissionOptions options_;
  ControllerApi* api_ = nullptr;
  std::vector<SloTenant> tenants_;
  SloPlan plan_;
  // Per tenant and device: the stage's counters at the last stats, and
  // the demand (IOPS) and floor hits of the interval they ended.
  struct Seen {
    int64_t arrived = -1;
    int64_t floor_hits = -1;
    double demand = 0;
    int64_t hits = 0;  // in the last interval
    int64_t iops = 0, p95_us = 0;
  };
  std::map<std::string, std::map<SloDevice, Seen>> seen_;
  std::map<std::string, int> hit_streak_;  // intervals in a row with hits
  std::deque<std::string> decisions_;
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_APPS_SLO_ADMISSION_H_

// SPDX-License-Identifier: Apache-2.0
// ControlTarget: what sroutectl's online commands talk to. One host's
// control port (HostTarget: a FUSE host's control socket, unix:PATH, or a
// storage server, HOST:PORT) or the controller (ControllerTarget, which
// acts on the sSwitch named by --host, or on the only one registered).
// Each command is written once against this interface; where a host and
// the controller show different things (the controller's rules carry
// their sSwitch and counters, its stats every host's state), the target
// renders its own Report.
//
// Errors: every call returns an absl::Status whose code is kUnavailable
// exactly when the host or controller could not be reached (sroutectl
// exits 2) and another code when it refused or the input was bad (exit 1);
// the message is what sroutectl prints. Targets re-code their transports'
// errors to that at their edge (NotReached, Refused). A target connects on
// its first call, so a command checks its own input before that.
#ifndef SROUTE_TOOLS_SROUTECTL_TARGET_H_
#define SROUTE_TOOLS_SROUTECTL_TARGET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/client.h"
#include "proto/hostctl.pb.h"
#include "rules/rule.h"

namespace sroute::ctl {

// What a listing shows: as text, and as JSON (--json: one message printed
// by ToJson, json_output.h). The text ends in a newline unless empty.
struct Report {
  std::string text;
  std::string json;
};

// Stages as a table (name, kind, IOs, in flight, parked, options) with
// each stage's counters beneath; `sswitch`, if given, is a column of it.
std::string StagesText(
    const google::protobuf::RepeatedPtrField<proto::StageStats>& stages,
    const std::string& sswitch = "");

// Traces as a listing: per IO a line (seq, op, file, range, tenant, rule,
// total, status) and a line per hop; as JSON, proto CtlTraces.
Report TracesReport(const proto::ControlResponse& resp);
// Slow IOs as a listing: the counts, then the recent and the longest, each
// as in TracesReport; as JSON, proto CtlSlowOps.
Report SlowOpsReport(const proto::ControlResponse& resp);

class ControlTarget {
 public:
  virtual ~ControlTarget() = default;

  // The rules installed (at the controller with --host: that sSwitch's,
  // without it every sSwitch's).
  virtual absl::StatusOr<Report> ListRules() = 0;
  // Installs `rules` (parsed here, sent parsed) all or nothing, recording
  // `owner`; returns their ids in order. At the controller the rule checker
  // runs first: an update it finds an error in is refused unless `force`;
  // what it reports is printed on stderr.
  virtual absl::StatusOr<std::vector<uint64_t>> AddRules(
      const std::vector<Rule>& rules, const std::string& owner, bool force) = 0;
  // The rule checker on the live table (the controller's: every sSwitch's,
  // or --host's): with `add`, what inserting those rules would introduce.
  virtual absl::StatusOr<proto::CheckResult> CheckRules(
      const std::vector<std::string>& add, bool deep) = 0;
  // Deletes the rules named by `args`: ids, and at a host patterns <...>
  // (every rule with that pattern).
  virtual absl::Status RemoveRules(const std::vector<std::string>& args) = 0;
  // Per-rule counters and the state of the sSwitches.
  virtual absl::StatusOr<Report> Stats() = 0;
  // Parks (on) or releases (off) IOs matching `pattern`.
  virtual absl::Status Quiesce(const std::string& pattern, bool on) = 0;
  // Waits until the IOs matching `pattern` in flight now have completed;
  // gives up after `timeout` (zero: the host's default).
  virtual absl::Status Drain(const std::string& pattern,
                             absl::Duration timeout) = 0;
  // Clears the fences of the files in `clear`, then lists the fenced
  // files (a host's own; text only).
  virtual absl::StatusOr<Report> Fences(
      const std::vector<std::string>& clear) = 0;
  // A storage server's delegate-rule records, oldest first; only those of
  // `sswitch` unless it is empty.
  virtual absl::StatusOr<Report> Records(const std::string& sswitch) = 0;
  // The hosts registered at the controller.
  virtual absl::StatusOr<Report> Hosts() = 0;
  // The controllers sharing the store, the leader, the store's health.
  virtual absl::StatusOr<Report> Controllers() = 0;
  // Acts on the host's stages (list, add, set, remove) and shows them after
  // (at the controller with --host: that host's; a listing without it:
  // every host's as of its last statistics report).
  virtual absl::StatusOr<Report> Stages(const proto::Stages& request) = 0;
  // The same request, its answer as it is: each host's stages (one host's
  // with a host target), for commands that show stages their own way.
  virtual absl::StatusOr<proto::StageLists> StageStates(
      const proto::Stages& request) = 0;
  // The paths of the IOs the host sampled for tracing (a rule's trace
  // delegate), after seq `after`, oldest first: each IO's header and time,
  // then its hops, deeper ones (another host's) indented.
  virtual absl::StatusOr<Report> Traces(uint64_t after) = 0;
  // The host's slow-op capture: sets its threshold first if `threshold_ms`
  // is not negative (0 turns it off), clears it if `clear`; then the
  // recent slow IOs, the longest, and the counts.
  virtual absl::StatusOr<Report> SlowOps(int64_t threshold_ms, bool clear) = 0;
  // The miss-ratio curves of the cache_sizing app (of `tenant`, or every
  // tenant's): size in bytes and miss ratio, a point a line.
  virtual absl::StatusOr<Report> CacheCurves(const std::string& tenant) = 0;
  // The wear_level app's state (its swap under way or its last) and the
  // wear of every host's flash endpoints.
  virtual absl::StatusOr<Report> WearStatus() = 0;
  // The tail_latency app's flows under way (off-loaded or being
  // reclaimed), the rules it owns and its last decisions.
  virtual absl::StatusOr<Report> OffloadStatus() = 0;
  // The controller's apps after `action` (proto/controller.proto Apps):
  // LIST every app (a line each), START or STOP `name` (with `args`); with
  // `detail`, `name`'s state, rules and last decisions only.
  virtual absl::StatusOr<Report> Apps(proto::Apps::Action action,
                                      const std::string& name,
                                      const std::string& args, bool detail) = 0;
  // One call of a profile sweep of an endpoint of the host (at the
  // controller: of --host's), waited for as long as it may take there.
  virtual absl::StatusOr<proto::ProfileProgress> ProfileStep(
      const proto::ProfileEndpoint& request) = 0;
  // Sets or clears the profiles the host judges its endpoints' congestion
  // by; the profiles set after.
  virtual absl::StatusOr<std::vector<proto::DeviceProfile>> SetProfiles(
      const proto::SetProfiles& request) = 0;
  // A request to an app the controller runs (proto AppCall): the app's
  // answer, as text and JSON.
  virtual absl::StatusOr<Report> CallApp(
      const std::string& app, const std::string& command,
      const std::vector<std::string>& args) = 0;
};

// One control request to the host at `host` (unix:PATH or HOST:PORT, with
// `secret_file` for a storage server); a response with an error code comes
// back as that error (coded as ControlTarget's calls are).
absl::StatusOr<proto::ControlResponse> CallHost(
    const std::string& host, const std::string& secret_file,
    const proto::ControlRequest& req, absl::Duration timeout);

// `host`: unix:PATH or HOST:PORT (empty: every call says --host is
// needed); `secret_file` for a storage server.
std::unique_ptr<ControlTarget> MakeHostTarget(std::string host,
                                              std::string secret_file);
// The controller at `address`; `sswitch` the one --host names, if any.
std::unique_ptr<ControlTarget> MakeControllerTarget(std::string address,
                                                    std::string secret_file,
                                                    std::string sswitch);

// A failed controller call's error as targets report it (kUnavailable only
// when the controller at `address` was not reached).
absl::Status ClassifyControllerError(const absl::Status& s,
                                     const std::string& address);
// A client of the controller at `address` (the secret read from
// `secret_file`; `name` owns what it installs), errors classified so.
absl::StatusOr<std::unique_ptr<ControllerClient>> ConnectController(
    const std::string& address, const std::string& secret_file,
    const std::string& name);

// `s` (not ok) as a target reports a host or controller it did not reach.
absl::Status NotReached(const absl::Status& s);
// `s` (not ok) as a target reports a refusal: kUnavailable is re-coded.
absl::Status Refused(const absl::Status& s);

}  // namespace sroute::ctl

#endif  // SROUTE_TOOLS_SROUTECTL_TARGET_H_

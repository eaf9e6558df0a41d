// SPDX-License-Identifier: Apache-2.0
// The C++ API for control applications (docs/design.md §7, §9): a ControlApp
// turns a policy into rules through a ControllerApi, in the controller's
// process (compiled in, or loaded from a plug-in library) or in its own
// (controller/client.h speaks the same API over the RPC).
//
//   class Hello : public sroute::ControlApp {
//     absl::Status Start(sroute::ControllerApi& api) override {
//       return api.Insert("fuse@h:/mnt", "<*, w, //home/x> -> <IO, //S2/x>")
//           .status();
//     }
//   };
//   static sroute::ControlAppRegistration hello(
//       "hello", [](const std::string& args) -> ... { ... });
#ifndef SROUTE_CONTROLLER_APP_API_H_
#define SROUTE_CONTROLLER_APP_API_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/controller.pb.h"
#include "rules/io_header.h"
#include "rules/rule.h"

namespace sroute {

// One rule's counters: growth over the last stats interval, plus totals.
struct RuleStats {
  uint64_t cid = 0;      // the controller's id (0: not a managed rule)
  uint64_t host_id = 0;  // the host's id
  std::string text;      // the rule (managed rules only)
  std::string owner;
  uint64_t reads = 0, writes = 0, others = 0;  // ops in the interval
  uint64_t read_bytes = 0, write_bytes = 0;
  uint64_t total_reads = 0, total_writes = 0, total_others = 0;
  uint64_t total_read_bytes = 0, total_write_bytes = 0;
  int64_t in_flight = 0;
  uint64_t errors = 0;              // in the interval
  uint64_t p50_us = 0, p99_us = 0;  // of the interval's IOs
  // Reads per write over the interval (reads when there were no writes).
  double read_write_ratio() const {
    return writes == 0 ? static_cast<double>(reads)
                       : static_cast<double>(reads) / writes;
  }
};

struct HostStats {
  std::string sswitch;
  bool connected = false;
  uint64_t version = 0;  // the host's rule-table version
  int64_t in_flight = 0;
  absl::Duration interval;
  std::vector<RuleStats> rules;  // rules with IO in the interval
  // Its stages with their counters (totals), as of its last report.
  std::vector<proto::StageStats> stages;
  // Its endpoints' gauges (flash.NAME.free_permille, ...), as of its last
  // report.
  std::map<std::string, int64_t> gauges;
};

// One flash endpoint's wear, from its host's gauges.
struct EndpointWear {
  std::string name;
  double erase_mean = 0;  // erases per block
  uint64_t erases = 0;    // total
};

// The flash endpoints of a host's gauges (flash.NAME.erase_mean_milli,
// flash.NAME.erases), by name.
std::vector<EndpointWear> WearOf(const std::map<std::string, int64_t>& gauges);

// The endpoint a file name "//EP/PATH" names ("EP"); "" if it is not one.
std::string EndpointOf(const std::string& file);

// The variance of the endpoints' mean erase counts (0 for fewer than two).
double WearVariance(const std::vector<EndpointWear>& wear);

struct StatsSnapshot {
  absl::Time at;
  std::vector<HostStats> hosts;
  const HostStats* Host(const std::string& sswitch) const {
    for (const HostStats& h : hosts) {
      if (h.sswitch == sswitch) return &h;
    }
    return nullptr;
  }
};

// An <IOHeader, controller> or <F, controller> detour's delivery.
struct HeaderEvent {
  std::string sswitch;
  IoHeader header;
  uint64_t rule_id = 0;              // the host's id of the rule that sent it
  std::optional<std::string> value;  // F detours: the delegate's value
};

struct TopologyHost {
  proto::HostInfo info;
  bool connected = false;
  uint64_t version = 0;
};

// A rule to insert: text in the rule language, which the controller reads
// (naming the column of an error), or a Rule read where it was written
// (sroutectl's parse, an app's own Rule), which the controller checks
// (rules/validate.h) and does not parse again.
struct RuleToInsert {
  RuleToInsert(std::string text) : text(std::move(text)) {}  // NOLINT
  RuleToInsert(const char* text) : text(text) {}             // NOLINT
  RuleToInsert(Rule rule) : rule(std::move(rule)) {}         // NOLINT

  // The text for people: `text`, or the rule printed.
  std::string Text() const;
  // The rule: `text` parsed ("COL: reason" if it does not), or `rule`
  // checked against the language (ValidateRule: one built by hand may
  // break it).
  absl::StatusOr<Rule> Read() const;

  std::string text;  // when `rule` is empty
  std::optional<Rule> rule;
};

// Changes to one sSwitch's rules.
struct RuleChanges {
  std::string sswitch;
  std::vector<RuleToInsert> insert;
  std::vector<uint64_t> remove;  // cids
};

// A consistent update (docs/design.md §6): flows are parked and drained on
// every sSwitch changed, the changes are checked everywhere, persisted,
// installed everywhere and the flows released; if any host says no (or does not
// answer), no host changes.
struct UpdateSpec {
  std::vector<RuleChanges> changes;
  std::vector<std::string> flows;  // more patterns to park
  std::string owner;               // default: the app's name
  absl::Duration timeout = absl::Seconds(10);
  // If not zero: the owner's rules are held under a lease of this length,
  // renewed with RenewLease (controller/client.h); when it runs out the
  // controller removes them (a tool that died cannot).
  absl::Duration lease = absl::ZeroDuration();
  // The rule checker (check/checker.h) runs before anything else and
  // refuses an update that introduces an error (a black hole or a loop),
  // with its report (FailedPrecondition); `force` installs it anyway.
  bool force = false;
};

struct UpdateOutcome {
  uint64_t version = 0;
  std::vector<uint64_t> cids;  // of the inserted rules, in order
  // The checker's report of what the update introduced (warnings, and with
  // `force` errors too); empty when it found nothing.
  std::string report;
};

// Thread safety: thread-safe.
class ControllerApi {
 public:
  virtual ~ControllerApi() = default;

  virtual std::vector<TopologyHost> Topology() = 0;
  virtual absl::StatusOr<std::vector<proto::ManagedRule>> Rules(
      const std::string& sswitch) = 0;
  virtual absl::StatusOr<UpdateOutcome> Update(const UpdateSpec& spec) = 0;
  virtual absl::Status Quiesce(const std::string& sswitch,
                               const std::string& pattern, bool on) = 0;
  virtual absl::Status Drain(const std::string& sswitch,
                             const std::string& pattern,
                             absl::Duration timeout) = 0;
  // The latest statistics of every host.
  virtual StatsSnapshot Stats() = 0;
  // Lists, adds, changes (e.g. a cache's partition sizes) or removes a
  // stage of `sswitch` (proto/hostctl.proto Stages); returns its stages
  // after. A change parks, drains and goes on at the host.
  virtual absl::StatusOr<std::vector<proto::StageStats>> Stages(
      const std::string& sswitch, const proto::Stages& request) = 0;
  // Copies data between the endpoints of `sswitch`'s host (proto/
  // hostctl.proto Copy, hostctl/copy_tree.h): a step of at most about
  // request.budget_ms, with its progress. An error of the host's copy is
  // returned as the status.
  virtual absl::StatusOr<proto::CopyProgress> Copy(
      const std::string& sswitch, const proto::Copy& request) = 0;
  // Sets (or clears) the profiles `sswitch`'s host judges its endpoints'
  // congestion by (proto/hostctl.proto SetProfiles); returns those set
  // after.
  virtual absl::StatusOr<std::vector<proto::DeviceProfile>> SetProfiles(
      const std::string& sswitch, const proto::SetProfiles& request) = 0;
  // Runs `fn` every `period` on the app's thread.
  virtual void AddTimer(absl::Duration period, std::function<void()> fn) = 0;
  // Runs `fn` once on the app's thread, after what is queued there (an app
  // in its own process: within a second).
  virtual void Post(std::function<void()> fn) = 0;
  // The app's own durable state.
  virtual absl::Status PutState(const std::string& key,
                                const std::string& value) = 0;
  virtual absl::StatusOr<std::string> GetState(const std::string& key) = 0;

  // The controller's clock: the time now (sroute-sim's apps run on its
  // virtual time). Apps take their time from here.
  virtual absl::Time Now() { return absl::Now(); }

  // Waits until `sswitch` is registered and connected (apps may start
  // before the hosts they program): DeadlineExceeded after `timeout`.
  absl::Status WaitForHost(const std::string& sswitch, absl::Duration timeout);

  // Single-sSwitch conveniences over Update.
  absl::StatusOr<uint64_t> Insert(const std::string& sswitch,
                                  const std::string& rule);
  absl::Status Delete(const std::string& sswitch, uint64_t cid);
};

// A control application. Its callbacks run on one thread of its own, one
// at a time.
class ControlApp {
 public:
  virtual ~ControlApp() = default;
  // Install rules, set timers. An error stops the app (and is logged).
  virtual absl::Status Start(ControllerApi& api) = 0;
  // Every stats interval.
  virtual void OnStats(const StatsSnapshot& stats) { (void)stats; }
  // IOHeader and F detours to the controller.
  virtual void OnHeader(const HeaderEvent& event) { (void)event; }
  // An IO of an <IO, controller> detour asks for its turn (the IOs of one
  // file go one at a time): it goes on once every app has called `go`
  // (exactly once, from any thread); until then it waits, up to its host's
  // detour timeout. Unlike the callbacks above this runs on a controller
  // thread, concurrently with them: it must not block (long work goes to
  // ControllerApi::Post) and guards what it shares. Apps run in their own
  // process (ControllerClient) are not asked. Default: go at once.
  virtual void OnIoTurn(const HeaderEvent& event, std::function<void()> go) {
    (void)event;
    go();
  }
  // A request from an administrator (proto/controller.proto AppCall:
  // `sroutectl apps call APP COMMAND ARGS...`, or an app's own sroutectl
  // commands): the answer, or an error whose message sroutectl prints
  // (InvalidArgument for a bad command or argument). On the app's thread;
  // the caller waits up to 30 s. Default: the app takes no requests.
  virtual absl::StatusOr<proto::AppAnswer> OnCall(const proto::AppCall& call);
};

using ControlAppFactory =
    std::function<absl::StatusOr<std::unique_ptr<ControlApp>>(
        const std::string& args)>;

// Control applications by name. Thread-safe.
class ControlAppRegistry {
 public:
  static ControlAppRegistry& Global();
  absl::Status Register(const std::string& name, ControlAppFactory factory);
  // "NAME" or "NAME:ARGS".
  absl::StatusOr<std::unique_ptr<ControlApp>> Create(const std::string& spec,
                                                     std::string* name) const;
  std::vector<std::string> Names() const;

 private:
  ControlAppRegistry() = default;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// Loads a plug-in: a shared library that exports
//   extern "C" void sroute_register_apps(sroute::ControlAppRegistry*);
absl::Status LoadControlAppPlugin(const std::string& path);

// Registers an app at static-initialization time (compiled in, or in a
// plug-in's own sroute_register_apps).
struct ControlAppRegistration {
  ControlAppRegistration(const char* name, ControlAppFactory factory);
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_APP_API_H_

// SPDX-License-Identifier: Apache-2.0
// Controller::Impl: the controller's state and the functions over it
// (internal to controller/). Its definitions are split by concern:
//   controller.cc          start and stop, the apps' API (LocalApi), the
//                          apps it runs (StartApp, StopApp, HandleApps)
//   host_traffic.cc        commands to hosts, registration and recovery,
//                          what hosts send (results, stats, header events,
//                          IO turns), events for WaitEvents
//   housekeeping.cc        views (Topology, Stats) and the sweep
//   takeover.cc            the store opened, leading and losing the lead
//   requests.cc            the RPC dispatch (Handle) and the
//                          administrator's requests
//   update.cc              the two-phase update (docs/design.md §6)
//   rule_check.cc          the rule checker's views of the hosts, an
//                          update's plan checked before it runs
//                          (CheckPlan), HandleCheck
//   owner_leases.cc        rules held under an owner's lease (HoldLease,
//                          renewals, their end, RestoreLeases), control
//                          passed on to a host
//   controller_metrics.cc  the controller's own metrics (AddMetrics)
// AppRunner (one app on its thread) is in app_runner.h.
//
// Lock order (as in controller.h): update_mu > mu; update_mu >
// ControllerStore::mu_; channels_mu, PendingCommand::mu and AppRunner::mu_
// are leaves.
#ifndef SROUTE_CONTROLLER_CONTROLLER_IMPL_H_
#define SROUTE_CONTROLLER_CONTROLLER_IMPL_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "check/checker.h"
#include "controller/app_api.h"
#include "controller/controller.h"
#include "controller/etcd_client.h"
#include "controller/kv.h"
#include "controller/leadership.h"
#include "controller/store.h"
#include "metrics/exposition.h"
#include "metrics/http_server.h"
#include "proto/controller.pb.h"
#include "rpc/channel.h"
#include "rpc/io_threads.h"
#include "rpc/server.h"
#include "sswitch/leases.h"
#include "sswitch/stats.h"
#include "util/background.h"
#include "util/mutex.h"

namespace sroute {
namespace controller_internal {

struct PendingCommand {
  // Guards done and result. A leaf.
  Mutex mu;
  CondVar cv;
  bool done ABSL_GUARDED_BY(mu) = false;
  proto::CommandResult result ABSL_GUARDED_BY(mu);
};

struct Session {
  uint64_t id = 0;
  proto::HostInfo host;
  bool connected = false;
  absl::Time last_seen;
  uint64_t version = 0;
  int64_t in_flight = 0;
  absl::Duration interval;
  std::unique_ptr<RpcServer::Call> poll;
  absl::Time poll_since;
  std::vector<proto::Command> queue;
  // Counters by (cid, host id): totals, and the last interval's growth.
  std::map<std::pair<uint64_t, uint64_t>, RuleStats> rules;
  std::vector<std::pair<uint64_t, uint64_t>> active;  // in the last report
  std::vector<proto::StageStats> stages;              // in the last report
  // Whether a report came since the host registered: until one does, its
  // stages are those it registered with (host.stages).
  bool reported = false;
  std::map<std::string, int64_t> gauges;  // in the last report
};

struct FileTurns {
  bool busy = false;
  uint64_t turn = 0;
  absl::Time granted;
  std::deque<std::unique_ptr<RpcServer::Call>> waiting;
};

// An update checked and numbered, ready for its two phases.
struct UpdatePlan {
  // What one sSwitch inserts (cids assigned) and removes.
  struct Change {
    std::string sswitch;
    std::vector<proto::ManagedRule> insert;
    std::vector<uint64_t> remove;
  };
  uint64_t id = 0;                 // the update's id in its commands
  std::vector<Change> changes;     // one per sSwitch, in the spec's order
  std::vector<std::string> flows;  // more patterns to park
  std::vector<uint64_t> cids;      // of the inserted rules, in order
  absl::Duration timeout;          // for the drains
};

// Where the controller keeps the apps started with sroutectl (a line each,
// "NAME" or "NAME:ARGS"), among the apps' states.
inline constexpr char kControllerApp[] = "controller";
inline constexpr char kKeptApps[] = "kept-apps";

inline void ReplyWith(RpcServer::Call& call, proto::ControllerReply body) {
  proto::RpcReply reply;
  *reply.mutable_controller() = std::move(body);
  call.Reply(reply);
}

inline absl::Status ResultStatus(const proto::CommandResult& r) {
  return absl::Status(static_cast<absl::StatusCode>(r.code()), r.message());
}

}  // namespace controller_internal

class AppRunner;

// The ControllerApi of the controller's own process, for one app (or the
// administrator): updates are owned by `owner`, state is kept under it.
class LocalApi : public ControllerApi {
 public:
  LocalApi(Controller::Impl* impl, std::string owner, AppRunner* runner)
      : impl_(impl), owner_(std::move(owner)), runner_(runner) {}
  std::vector<TopologyHost> Topology() override;
  absl::StatusOr<std::vector<proto::ManagedRule>> Rules(
      const std::string& sswitch) override;
  absl::StatusOr<UpdateOutcome> Update(const UpdateSpec& spec) override;
  absl::Status Quiesce(const std::string& sswitch, const std::string& pattern,
                       bool on) override;
  absl::Status Drain(const std::string& sswitch, const std::string& pattern,
                     absl::Duration timeout) override;
  StatsSnapshot Stats() override;
  absl::StatusOr<proto::CopyProgress> Copy(const std::string& sswitch,
                                           const proto::Copy& request) override;
  absl::StatusOr<std::vector<proto::DeviceProfile>> SetProfiles(
      const std::string& sswitch, const proto::SetProfiles& request) override;
  absl::StatusOr<std::vector<proto::StageStats>> Stages(
      const std::string& sswitch, const proto::Stages& request) override;
  void AddTimer(absl::Duration period, std::function<void()> fn) override;
  void Post(std::function<void()> fn) override;
  absl::Status PutState(const std::string& key,
                        const std::string& value) override;
  absl::StatusOr<std::string> GetState(const std::string& key) override;

 private:
  Controller::Impl* const impl_;
  const std::string owner_;
  AppRunner* const runner_;
};

struct Controller::Impl {
  using Call = RpcServer::Call;
  using PendingCommand = controller_internal::PendingCommand;
  using Session = controller_internal::Session;
  using FileTurns = controller_internal::FileTurns;
  using UpdatePlan = controller_internal::UpdatePlan;

  // Out of line: AppRunner is complete in app_runner.h only.
  explicit Impl(ControllerOptions o);
  ~Impl();

  // --- RPC (requests.cc): Handle dispatches each request to its handler.
  void Handle(std::unique_ptr<Call> call);
  // Runs `handler` on the background threads (it waits for hosts or for
  // other requests), keeping the call alive until it is done.
  void InBackground(std::unique_ptr<Call> call, void (Impl::*handler)(Call&));
  // From hosts (host_traffic.cc).
  void HandleRegister(Call& call);
  void HandleWaitCommands(std::unique_ptr<Call> call);
  void HandleCommandResult(std::unique_ptr<Call> call);
  void HandleStats(std::unique_ptr<Call> call);
  void HandleHeaderEvent(std::unique_ptr<Call> call);
  void HandleIoTurn(std::unique_ptr<Call> call);
  void HandleIoTurnDone(std::unique_ptr<Call> call);
  // From administrators and out-of-process apps (requests.cc).
  void HandleListHosts(std::unique_ptr<Call> call);
  void HandleListRules(std::unique_ptr<Call> call);
  void HandleUpdate(Call& call);
  void HandleQuiesce(Call& call);
  void HandleDrain(Call& call);
  void HandleGetStats(std::unique_ptr<Call> call);
  void HandleStages(Call& call);
  void HandleRenewLease(Call& call);
  void HandleControlAt(Call& call);

  // --- Leases (owner_leases.cc): rules of a tool that must not outlive it.
  // Holds `owner`'s lease for `ttl` and keeps it in the store, so that a
  // restarted controller still ends it.
  void HoldLease(const std::string& owner, absl::Duration ttl);
  // Ends the lease and removes every rule of `owner` in one update; returns
  // its version (0: there was nothing to remove).
  absl::StatusOr<uint64_t> EndLease(const std::string& owner);
  // The leases the store holds, held again for their length (at start).
  void RestoreLeases();
  void HandleWaitEvents(std::unique_ptr<Call> call);  // host_traffic.cc
  void HandlePutState(std::unique_ptr<Call> call);
  void HandleGetState(std::unique_ptr<Call> call);
  // What the host requests above carry, taken in (host_traffic.cc).
  void RecordCommandResult(const proto::CommandResult& r);
  void RecordStats(const proto::StatsReport& r);
  void DeliverHeaderEvent(const proto::HeaderEvent& e);
  void EndIoTurn(const proto::IoTurnDone& d);
  // Gives `call` (an IoTurn) its turn once the apps let it go.
  void Grant(std::unique_ptr<Call> call, uint64_t turn);

  // --- Hosts (host_traffic.cc).
  absl::StatusOr<proto::CommandResult> SendCommand(const std::string& sswitch,
                                                   proto::Command command,
                                                   absl::Duration timeout);
  // Sends each command to its sSwitch at once; results in the same order.
  std::vector<absl::StatusOr<proto::CommandResult>> SendAll(
      const std::vector<std::pair<std::string, proto::Command>>& commands,
      absl::Duration timeout);
  // Takes the session's waiting poll if it has commands to hand out; the
  // caller answers it after unlocking.
  std::unique_ptr<Call> TakePoll(Session& s, proto::ControllerReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  absl::StatusOr<std::vector<proto::DelegateRecord>> RecoverRecords(
      const proto::HostInfo& host);
  RpcChannel* ServerChannel(const std::string& address);
  // After a reclaim step that left nothing away (proto/hostctl.proto Copy
  // forget_anchor): drops the records of `sswitch` under the request's
  // anchor on every server its host reaches; failures are logged (the
  // records are then only larger than needed, never wrong).
  void ForgetAfterReclaim(const std::string& sswitch, const proto::Copy& req,
                          const proto::CopyProgress& progress);

  // --- The update protocol (update.cc). Update runs the phases below, one
  // update at a time; each phase runs with update_mu held and mu free.
  absl::StatusOr<UpdateOutcome> Update(const UpdateSpec& spec,
                                       const std::string& owner)
      ABSL_LOCKS_EXCLUDED(update_mu, mu);
  // Checks the spec against the rule language and the store (rules to
  // remove must be on the sSwitch named): the changes grouped by sSwitch,
  // not yet numbered. Fails with InvalidArgument or NotFound; no host or
  // store is changed.
  absl::StatusOr<UpdatePlan> PlanUpdate(const UpdateSpec& spec,
                                        const std::string& owner)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);
  // Phase zero (rule_check.cc): the rule checker over every sSwitch's
  // persisted rules with the plan applied, against the topology. Fails
  // with FailedPrecondition and the report when the plan introduces an
  // error, unless `force`; else *report holds what it found (may be
  // empty).
  absl::Status CheckPlan(const UpdatePlan& plan, bool force,
                         std::string* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);
  // After the plan was persisted as `version`: the checker's tables follow.
  void CheckerFollows(const UpdatePlan& plan, uint64_t version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);
  // The checker over the store's rules and the topology now (the kept one
  // while they have not changed).
  check::Checker& CurrentChecker() ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu)
      ABSL_LOCKS_EXCLUDED(mu);
  // An administrator's check (proto CheckAt).
  void HandleCheck(Call& call);
  // Every sSwitch as the checker sees it: topology, and (`with_rules`)
  // the persisted rules.
  std::vector<check::SwitchView> CheckerViews(bool with_rules)
      ABSL_LOCKS_EXCLUDED(mu);
  // The checker, kept across updates while the store's version and the
  // topology it was built from hold.
  std::unique_ptr<check::Checker> checker ABSL_GUARDED_BY(update_mu);
  uint64_t checker_version ABSL_GUARDED_BY(update_mu) = 0;
  std::string checker_topology ABSL_GUARDED_BY(update_mu);

  // Fails with Unavailable unless every sSwitch of the plan has a
  // connected host.
  absl::Status CheckHostsConnected(const UpdatePlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);
  // Gives the inserted rules their cids (taken from the store for good)
  // and the update its id.
  absl::Status NumberUpdate(UpdatePlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);
  // Phase 1: every host of the plan parks the flows and the patterns of the
  // rules changed, drains them and checks its changes, and holds them (for
  // a lease) until the commit or the abort. OK only if every host acked;
  // else the first nack or silence, naming its host. The caller aborts.
  absl::Status PrepareEverywhere(const UpdatePlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);
  // Tells every host of the plan to drop the update and release its flows
  // under the old rules; waits (up to a command timeout) for their answers
  // but not for their success: a host that does not hear it drops the
  // update when its lease ends.
  void AbortEverywhere(const UpdatePlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);
  // Writes the plan's changes to the store as the next version, and to the
  // rule cache: the point of no return. Returns the version; on failure
  // nothing is written and no host changed.
  absl::StatusOr<uint64_t> PersistUpdate(const UpdatePlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);
  // Phase 2: every host installs its prepared changes and releases its
  // flows. A host whose commit fails (or that does not answer) is
  // reconciled to its persisted rules now (ReconcileHost), or when it
  // registers again; the others' versions are recorded.
  // The order of phase one: waves of indexes into plan.changes, each host
  // after the hosts that send IO to it.
  std::vector<std::vector<size_t>> PrepareWaves(const UpdatePlan& plan)
      ABSL_LOCKS_EXCLUDED(mu);
  void CommitEverywhere(const UpdatePlan& plan, uint64_t version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);
  // Sends `sswitch` its persisted rules to install in place of its managed
  // rules (dropping updates it holds). Best effort: a host that misses it
  // gets them when it registers again.
  void ReconcileHost(const std::string& sswitch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(update_mu) ABSL_LOCKS_EXCLUDED(mu);

  // --- Views and the sweep (housekeeping.cc; AddEvent host_traffic.cc).
  std::vector<TopologyHost> Topology();
  StatsSnapshot Stats();
  void AddEvent(proto::Event e);
  void Sweep();

  // --- Leadership (takeover.cc). On RocksDB the controller leads from
  // its start; on etcd once elected (Leadership), and until then (or after
  // its leadership is gone) it answers hosts and clients with the leader's
  // address (rpc/leader.h), ListControllers excepted.
  absl::Status OpenStore();
  // Loads what a leader keeps in memory and starts the leader's work:
  // epoch, rule cache, leases, apps, sweeper. Then `leading` is set.
  absl::Status BecomeLeader();
  void LeadershipLost(const std::string& why);
  // The address hosts and clients reach this controller at.
  std::string SelfAddress() ABSL_LOCKS_EXCLUDED(leadership_mu);
  // What a controller that does not lead answers: UNAVAILABLE naming the
  // leader, and why this one stopped leading if it did.
  absl::Status FollowerError() ABSL_LOCKS_EXCLUDED(mu, leadership_mu);
  void HandleListControllers(Call& call);

  const ControllerOptions options;
  uint64_t epoch = 0;  // written before `leading` is set
  std::atomic<bool> leading{false};
  std::unique_ptr<EtcdClient> etcd;  // with an etcd store
  EtcdKv* etcd_kv = nullptr;         // owned by store
  // The election (etcd only), set once it started: requests and its own
  // callbacks may come before. Guarded by leadership_mu, a leaf (calls into
  // Leadership take only its own lock; its callbacks run without it).
  Mutex leadership_mu;
  std::unique_ptr<Leadership> leadership ABSL_GUARDED_BY(leadership_mu);
  // etcd: PREFIX and PREFIX"leader", set before the RPC starts.
  std::string etcd_prefix;
  std::string leader_key;
  std::string listening ABSL_GUARDED_BY(leadership_mu);  // the RPC's address
  // The leader's address as the election last read it ("" if unknown).
  std::string LeaderAddress() ABSL_LOCKS_EXCLUDED(leadership_mu);
  // Why this controller stopped leading ("" if it never led or leads), for
  // the answers it gives meanwhile. Guarded by mu.
  std::string deposed ABSL_GUARDED_BY(mu);
  // After a lost leadership, waits for the store to answer, then calls
  // options.on_leadership_lost (the daemon exits there): a controller cut
  // off from etcd stays up to say so, and starts again as a follower once
  // etcd is back.
  std::thread deposed_watch;
  std::unique_ptr<ControllerStore> store;
  std::unique_ptr<IoThreads> threads;
  std::unique_ptr<Background> background;

  // One update (or adoption of a new host's rules) at a time, from its
  // checks to its last commit: held across the store's writes and the waits
  // for hosts. Order: before mu and ControllerStore::mu_.
  Mutex update_mu;
  // Guards the sessions, pending commands, rule cache, events and turns
  // (below). Order: after update_mu; else a leaf: no store access, reply or
  // wait happens under it.
  Mutex mu ABSL_ACQUIRED_AFTER(update_mu);
  // By sSwitch.
  std::map<std::string, Session> sessions ABSL_GUARDED_BY(mu);
  // When a registration under a name in use was last logged (a duplicate
  // retries every half second: logged once a minute).
  std::map<std::string, absl::Time> refusals_logged ABSL_GUARDED_BY(mu);
  // By command.
  std::map<uint64_t, std::shared_ptr<PendingCommand>> pending
      ABSL_GUARDED_BY(mu);
  // By cid.
  std::map<uint64_t, proto::ManagedRule> rule_cache ABSL_GUARDED_BY(mu);
  uint64_t next_session ABSL_GUARDED_BY(mu) = 1;
  uint64_t next_command ABSL_GUARDED_BY(mu) = 1;
  uint64_t next_update ABSL_GUARDED_BY(mu) = 1;
  std::deque<proto::Event> events ABSL_GUARDED_BY(mu);
  uint64_t next_event ABSL_GUARDED_BY(mu) = 1;
  std::vector<std::pair<std::unique_ptr<Call>, absl::Time>> event_waiters
      ABSL_GUARDED_BY(mu);
  std::map<std::string, FileTurns> turns ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  CondVar sweep_cv;  // on mu: stopping

  // Guards channels. A leaf.
  Mutex channels_mu;
  std::map<std::string, std::unique_ptr<RpcChannel>> channels
      ABSL_GUARDED_BY(channels_mu);

  std::unique_ptr<LocalApi> admin;
  // Rule owners under leases. Stopped first and destroyed once no thread
  // that renews leases is left (~Controller).
  std::unique_ptr<LeaseKeeper> leases;
  // Guards lease_ttls. A leaf.
  Mutex leases_mu;
  std::map<std::string, absl::Duration> lease_ttls ABSL_GUARDED_BY(leases_mu);
  // The apps running now: an immutable list swapped under apps_mu (a
  // leaf), so that the threads delivering events take a snapshot and call
  // the apps without it. A runner stays usable once stopped (it drops
  // what it is given), so a snapshot may outlive its place in the list.
  using AppList = std::vector<std::shared_ptr<AppRunner>>;
  Mutex apps_mu;
  std::shared_ptr<const AppList> apps ABSL_GUARDED_BY(apps_mu) =
      std::make_shared<AppList>();
  std::shared_ptr<const AppList> Apps() ABSL_LOCKS_EXCLUDED(apps_mu);
  // Starts app `spec` ("NAME" or "NAME:ARGS"); `keep`: remember it in the
  // store, to run it again at every start until it is stopped.
  absl::Status StartApp(const std::string& spec, bool from_command_line,
                        bool keep) ABSL_LOCKS_EXCLUDED(apps_mu);
  absl::Status StopApp(const std::string& name) ABSL_LOCKS_EXCLUDED(apps_mu);
  void HandleApps(Call& call);
  void HandleAppCall(Call& call);
  std::thread sweeper;

  // What /metrics shows (AddMetrics): updates by how they ended (refused:
  // by a check before any host heard of them, the rule checker's
  // included; aborted: after phase 1 began), the time of committed ones,
  // stats reports received.
  std::atomic<uint64_t> updates_committed{0};
  std::atomic<uint64_t> updates_aborted{0};
  std::atomic<uint64_t> updates_refused{0};
  LatencyHistogram update_latency;
  std::atomic<uint64_t> stats_reports{0};
  void AddMetrics(metrics::Exposition* out) ABSL_LOCKS_EXCLUDED(mu, apps_mu);
  std::unique_ptr<metrics::MetricsServer> metrics_server;

  std::unique_ptr<RpcServer> rpc;  // last: no request before all is set up
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_CONTROLLER_IMPL_H_

// SPDX-License-Identifier: Apache-2.0
// ControllerClient: the ControllerApi of a control application (or tool)
// in its own process, over the RPC to sroute-controller. Run() drives a
// ControlApp as the controller would: Start, then stats, headers and timers
// on the calling thread until Stop().
//
// Given several controllers, a call goes to the leader: a follower's
// redirect is followed, and a call that could not leave for a controller
// that is down (rpc/channel.h NotSent) goes to the next; one that may have
// been carried out is never sent twice.
//
// Thread safety: thread-safe; the app's callbacks run on Run's thread.
#ifndef SROUTE_CONTROLLER_CLIENT_H_
#define SROUTE_CONTROLLER_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/app_api.h"
#include "proto/controller.pb.h"
#include "rpc/channel.h"
#include "rpc/controller_channels.h"
#include "rpc/io_threads.h"
#include "util/mutex.h"

namespace sroute {

class ControllerClient : public ControllerApi {
 public:
  struct Options {
    // The controller's HOST:PORT, or several, comma-separated, of
    // controllers sharing a store: calls go to the one that leads.
    std::string address;
    std::string secret;
    std::string name = "client";  // owner of updates; app-state scope
    absl::Duration timeout = absl::Seconds(30);  // per call
  };
  static absl::StatusOr<std::unique_ptr<ControllerClient>> Connect(
      Options options);
  ~ControllerClient() override;

  // --- ControllerApi.
  std::vector<TopologyHost> Topology() override;
  absl::StatusOr<std::vector<proto::ManagedRule>> Rules(
      const std::string& sswitch) override;
  absl::StatusOr<UpdateOutcome> Update(const UpdateSpec& spec) override;
  absl::Status Quiesce(const std::string& sswitch, const std::string& pattern,
                       bool on) override;
  absl::Status Drain(const std::string& sswitch, const std::string& pattern,
                     absl::Duration timeout) override;
  StatsSnapshot Stats() override;
  absl::StatusOr<std::vector<proto::StageStats>> Stages(
      const std::string& sswitch, const proto::Stages& request) override;
  absl::StatusOr<std::vector<proto::DeviceProfile>> SetProfiles(
      const std::string& sswitch, const proto::SetProfiles& request) override;
  // One call of a profile sweep at `sswitch`'s host (proto ProfileEndpoint),
  // waited for as long as it may take there.
  absl::StatusOr<proto::ProfileProgress> ProfileStep(
      const std::string& sswitch, const proto::ProfileEndpoint& request);
  absl::StatusOr<proto::CopyProgress> Copy(const std::string& sswitch,
                                           const proto::Copy& request) override;
  void AddTimer(absl::Duration period, std::function<void()> fn) override;
  // Runs `fn` on Run's thread after its next wait for events.
  void Post(std::function<void()> fn) override;
  absl::Status PutState(const std::string& key,
                        const std::string& value) override;
  absl::StatusOr<std::string> GetState(const std::string& key) override;

  // --- Admin views (sroutectl).
  absl::StatusOr<proto::HostList> ListHosts();
  // The controllers sharing the store, the leader, the store's health
  // (answered by whichever controller the client reaches).
  absl::StatusOr<proto::ControllerMembers> ListControllers();
  // Rules with their latest totals; every sSwitch's if `sswitch` is empty.
  absl::StatusOr<proto::RuleList> ListRules(const std::string& sswitch);
  // The latest interval's counters of every rule that saw IO.
  absl::StatusOr<proto::RuleList> IntervalStats();
  // Another app's durable state (e.g. cache_sizing's curves); NotFound if
  // it has none under `key`.
  absl::StatusOr<std::string> GetAppState(const std::string& app,
                                          const std::string& key);
  // The controller's own apps (proto/controller.proto Apps): list, start
  // or stop one; the list after.
  absl::StatusOr<proto::AppList> Apps(const proto::Apps& request);
  // A request to an app the controller runs (ControlApp::OnCall): its
  // answer, or its error.
  absl::StatusOr<proto::AppAnswer> CallApp(const proto::AppCall& request);
  // The stages of `sswitch` after `request`; with no sswitch (a LIST only),
  // every host's as of its last report.
  absl::StatusOr<proto::StageLists> StagesAt(const std::string& sswitch,
                                             const proto::Stages& request);

  // Renews the lease of `owner` (UpdateSpec::lease) for `ttl`; a zero ttl
  // ends it and removes the owner's rules now (returns the version of that
  // update, 0 if there were none). NotFound if it holds no lease (it ran
  // out: its rules are gone).
  absl::StatusOr<uint64_t> RenewLease(const std::string& owner,
                                      absl::Duration ttl);
  // The rule checker over the cluster (proto CheckAt): with `add`, what
  // inserting those rules on `sswitch` would introduce; else every finding
  // (only `sswitch`'s, if named).
  absl::StatusOr<proto::CheckResult> CheckRules(
      const std::string& sswitch, const std::vector<std::string>& add,
      bool deep);
  // A control request that changes no rule (traces, slow_ops, stats, copy)
  // answered by the host of `sswitch`.
  absl::StatusOr<proto::ControlResponse> ControlAt(
      const std::string& sswitch, const proto::ControlRequest& request);

  // Runs `app` until Stop() (or until Start fails: its error).
  absl::Status Run(ControlApp& app);
  void Stop();

 private:
  ControllerClient(Options options, std::unique_ptr<IoThreads> threads,
                   std::unique_ptr<ControllerChannels> controllers);
  absl::StatusOr<proto::ControllerReply> Call(proto::ControllerRequest req,
                                              absl::Duration timeout);
  absl::StatusOr<proto::ControllerReply> Call(proto::ControllerRequest req) {
    return Call(std::move(req), options_.timeout);
  }

  const Options options_;
  std::unique_ptr<IoThreads> threads_;
  // The given controllers and leaders named by followers; calls go to the
  // current one, which follows the leader. Declared after threads_: goes
  // before them.
  std::unique_ptr<ControllerChannels> controllers_;
  struct Timer {
    absl::Duration period;
    absl::Time next;
    std::function<void()> fn;
  };
  // Guards timers_ and posted_. A leaf: calls and timers run without it.
  Mutex mu_;
  std::vector<Timer> timers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> posted_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_CLIENT_H_

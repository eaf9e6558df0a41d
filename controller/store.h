// SPDX-License-Identifier: Apache-2.0
// ControllerStore: the controller's durable state (docs/design.md §6) in a
// KvStore (controller/kv.h: RocksDB by default, etcd for several
// controllers): the managed rules of every sSwitch in order, the topology
// hosts last registered, control applications' state, and counters (next
// rule id, update version, epoch).
//
// Rule ids (cids) grow forever; a sSwitch's rules are kept in cid order,
// which is the order they were added in (priorities are in the rules).
//
// Reads go to the KvStore each time (another controller may have written
// before this one led), except the update version and the rule id
// counter, which only the leader moves: read at Open and at Reload.
//
// Every call may fail when the store does (etcd without a quorum, a full
// disk); nothing half-written is left: every change is one KvStore Apply.
//
// Thread safety: thread-safe. Apply is atomic (one KvStore Apply, durable).
#ifndef SROUTE_CONTROLLER_STORE_H_
#define SROUTE_CONTROLLER_STORE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "controller/kv.h"
#include "proto/controller.pb.h"
#include "util/mutex.h"

namespace sroute {

class ControllerStore {
 public:
  // RocksDB in `dir`.
  static absl::StatusOr<std::unique_ptr<ControllerStore>> Open(
      const std::string& dir);
  static absl::StatusOr<std::unique_ptr<ControllerStore>> Open(
      std::unique_ptr<KvStore> kv);
  ~ControllerStore();

  KvStore& kv() { return *kv_; }
  // Reads the version and the rule id counter again (a controller that
  // just became the leader: the previous leader moved them).
  absl::Status Reload();

  // One atomic change to the rules: `insert` (their cids already assigned
  // by NextCids) and `remove` (cids), and the new update version.
  struct RuleChange {
    std::string sswitch;
    std::vector<proto::ManagedRule> insert;
    std::vector<uint64_t> remove;
  };
  absl::Status Apply(const std::vector<RuleChange>& changes, uint64_t version);

  // Reserves `n` fresh cids; returns the first. The counter is stored with
  // the next Apply, so no stored rule's id is ever handed out again.
  absl::StatusOr<uint64_t> NextCids(size_t n);

  // The managed rules of `sswitch`, in order.
  absl::StatusOr<std::vector<proto::ManagedRule>> Rules(
      const std::string& sswitch) const;
  // Every sSwitch that has managed rules or registered once.
  absl::StatusOr<std::vector<std::string>> SSwitches() const;
  // The sSwitch a cid belongs to, nullopt if there is no such rule.
  absl::StatusOr<std::optional<std::string>> SSwitchOf(uint64_t cid) const;
  absl::StatusOr<bool> Known(const std::string& sswitch) const;

  absl::Status PutHost(const proto::HostInfo& host);
  absl::StatusOr<std::vector<proto::HostInfo>> Hosts() const;

  // The stages the controller added to (or changed on) an sSwitch, by
  // name: given back when the host registers, before its rules.
  absl::Status PutStage(const std::string& sswitch,
                        const proto::StageConfig& stage);
  absl::Status DeleteStage(const std::string& sswitch, const std::string& name);
  absl::StatusOr<std::vector<proto::StageConfig>> Stages(
      const std::string& sswitch) const;

  absl::Status PutAppState(const std::string& app, const std::string& key,
                           const std::string& value);
  absl::StatusOr<std::string> GetAppState(const std::string& app,
                                          const std::string& key) const;

  // The update version last applied.
  uint64_t version() const;
  // Increments and returns the epoch (once per controller start).
  absl::StatusOr<uint64_t> NextEpoch();

 private:
  explicit ControllerStore(std::unique_ptr<KvStore> kv);
  absl::StatusOr<uint64_t> GetCounter(const std::string& key) const;
  std::unique_ptr<KvStore> kv_;
  // Serializes the read-modify-write of counters (only the leader writes,
  // so no other controller races it: etcd fences the others); reads take
  // no lock. A leaf (after Controller::Impl::update_mu).
  Mutex mu_;
  std::atomic<uint64_t> version_{0};
  uint64_t next_cid_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_STORE_H_

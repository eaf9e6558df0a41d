// ControllerStore: the controller's durable state in RocksDB (DESIGN.md §6):
// the managed rules of every sSwitch in order, the topology hosts last
// registered, control applications' state, and counters (next rule id,
// update version, epoch).
//
// Rule ids (cids) grow forever; a sSwitch's rules are kept in cid order,
// which is the order they were added in (priorities are in the rules).
//
// Thread safety: thread-safe. Apply is atomic (one RocksDB batch, synced).
#ifndef SROUTE_CONTROLLER_STORE_H_
#define SROUTE_CONTROLLER_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/controller.pb.h"
#include "util/mutex.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace sroute {

class ControllerStore {
 public:
  static absl::StatusOr<std::unique_ptr<ControllerStore>> Open(
      const std::string& dir);
  ~ControllerStore();

  // One atomic change to the rules: `insert` (their cids already assigned
  // by NextCids) and `remove` (cids), and the new update version.
  struct RuleChange {
    std::string sswitch;
    std::vector<proto::ManagedRule> insert;
    std::vector<uint64_t> remove;
  };
  absl::Status Apply(const std::vector<RuleChange>& changes, uint64_t version);

  // Reserves `n` fresh cids; returns the first. Reserved ids are persisted,
  // so none is ever handed out twice, even if the change using them fails.
  absl::StatusOr<uint64_t> NextCids(size_t n);

  // The managed rules of `sswitch`, in order.
  absl::StatusOr<std::vector<proto::ManagedRule>> Rules(
      const std::string& sswitch) const;
  // Every sSwitch that has managed rules or registered once.
  std::vector<std::string> SSwitches() const;
  // The sSwitch a cid belongs to, if it exists.
  std::optional<std::string> SSwitchOf(uint64_t cid) const;
  bool Known(const std::string& sswitch) const;

  absl::Status PutHost(const proto::HostInfo& host);
  std::vector<proto::HostInfo> Hosts() const;

  // The stages the controller added to (or changed on) an sSwitch, by
  // name: given back when the host registers, before its rules.
  absl::Status PutStage(const std::string& sswitch,
                        const proto::StageConfig& stage);
  absl::Status DeleteStage(const std::string& sswitch, const std::string& name);
  std::vector<proto::StageConfig> Stages(const std::string& sswitch) const;

  absl::Status PutAppState(const std::string& app, const std::string& key,
                           const std::string& value);
  absl::StatusOr<std::string> GetAppState(const std::string& app,
                                          const std::string& key) const;

  uint64_t version() const;
  // Increments and returns the epoch (once per controller start).
  absl::StatusOr<uint64_t> NextEpoch();

 private:
  explicit ControllerStore(std::unique_ptr<rocksdb::DB> db);
  absl::StatusOr<uint64_t> GetCounter(const std::string& key) const;
  std::unique_ptr<rocksdb::DB> db_;
  // Serializes every write to db_ (and so the read-modify-write of
  // counters); reads take no lock. RocksDB would group concurrent writers
  // itself, with a leader copying the others' batches, but Debian's RocksDB
  // is not built with TSan, which then sees that copy as a race; the
  // controller writes rarely. Held across the (synced) write itself. A leaf
  // (after Controller::Impl::update_mu).
  Mutex mu_;
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_STORE_H_

// SPDX-License-Identifier: Apache-2.0
// KvStore: the ordered key-value store under the controller's state
// (controller/store.h). Two engines: RocksDB in a local directory (one
// controller, the default) and etcd (several controllers sharing one
// replicated store, one of them leading: controller/leadership.h).
//
// Keys and values are arbitrary bytes. Scan returns keys in byte order.
// Apply is atomic (all writes or none) and, once it returns OK, durable:
// synced to disk (RocksDB) or committed by a quorum of the etcd cluster.
//
// Fencing (etcd): a store may be fenced by a leadership (SetFence); from
// then on every Apply succeeds only while that leadership still holds in
// etcd itself, checked in the same transaction as the writes. A controller
// that lost its lease while paused therefore writes nothing, whatever it
// believes (FAILED_PRECONDITION). An unfenced etcd store refuses writes:
// only a leader writes.
//
// Thread safety: implementations are thread-safe.
#ifndef SROUTE_CONTROLLER_KV_H_
#define SROUTE_CONTROLLER_KV_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace sroute {

class EtcdClient;

class KvStore {
 public:
  virtual ~KvStore() = default;

  // A put (value set) or a delete (value empty).
  struct Write {
    std::string key;
    std::optional<std::string> value;
  };

  // The value of `key`, nullopt if there is none.
  virtual absl::StatusOr<std::optional<std::string>> Get(
      const std::string& key) const = 0;
  // Every key that starts with `prefix`, in order, with its value (empty
  // with keys_only).
  virtual absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Scan(
      const std::string& prefix, bool keys_only = false) const = 0;
  // All of `writes` or none. `durable` false lets RocksDB skip the sync (a
  // later durable Apply makes it durable too); etcd commits every write.
  virtual absl::Status Apply(const std::vector<Write>& writes,
                             bool durable = true) = 0;
  // "rocksdb:DIR" or "etcd://H:P,...": for logs and `sroutectl controllers`.
  virtual std::string Describe() const = 0;
  // Drops what the store may hold in memory and reads it again (CachedKv;
  // nothing for the others).
  virtual absl::Status Refresh() { return absl::OkStatus(); }
};

// `inner` with every key in memory: reads never leave the process, writes
// go to `inner` first and, once applied, to the copy. For a leader on
// etcd: only the leader writes (the others are fenced), so its copy is the
// store's state; Refresh (taking over) reads it all again.
//
// REQUIRES: writes are serialized by the caller (ControllerStore::mu_), so
// the copy applies them in the order `inner` did.
class CachedKv : public KvStore {
 public:
  explicit CachedKv(std::unique_ptr<KvStore> inner);
  ~CachedKv() override;

  absl::StatusOr<std::optional<std::string>> Get(
      const std::string& key) const override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Scan(
      const std::string& prefix, bool keys_only = false) const override;
  absl::Status Apply(const std::vector<Write>& writes,
                     bool durable = true) override;
  std::string Describe() const override;
  absl::Status Refresh() override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// RocksDB in `dir` (created if missing).
absl::StatusOr<std::unique_ptr<KvStore>> OpenRocksDbKv(const std::string& dir);

// An etcd-backed store: every key under `prefix` in etcd.
class EtcdKv : public KvStore {
 public:
  // REQUIRES: `client` outlives the store.
  EtcdKv(EtcdClient* client, std::string prefix, size_t max_txn_ops = 128);
  ~EtcdKv() override;

  absl::StatusOr<std::optional<std::string>> Get(
      const std::string& key) const override;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Scan(
      const std::string& prefix, bool keys_only = false) const override;
  absl::Status Apply(const std::vector<Write>& writes,
                     bool durable = true) override;
  std::string Describe() const override;

  // From now on writes succeed only while etcd's key `fence_key` (a full
  // etcd key, not under the prefix) still has `create_revision`: the
  // leadership key this controller created. 0 removes the fence (and so
  // every write is refused).
  void SetFence(std::string fence_key, int64_t create_revision);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_KV_H_

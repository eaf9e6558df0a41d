// SPDX-License-Identifier: Apache-2.0
// RecordStore: a storage server's durable state in RocksDB: the
// delegate-rule records that arrive with IOs (docs/design.md §5), by sSwitch
// and sequence number, and the server's identity.
//
// Records stay proportional to the distinct byte ranges they describe, not
// to the writes that made them. A record whose rule names one exact file
// with a byte range (track_writes's read rules) supersedes, over the bytes
// it covers, the older records of the same sSwitch and anchor whose rule
// has the same pattern but for the range (whatever their targets): those
// are cut to the bytes it does not cover, or dropped. Replaying the
// remaining records oldest first (Delegate::Restore) therefore gives every
// byte the same rule as replaying all of them would: for each byte the
// newest record that covers it is kept whole. A record older than one
// stored already is cut around it the same way. Pieces of one record keep
// its seq. Deleted records are compacted away by RocksDB (files with many
// deletions are compacted early), and the write buffer is small, so the
// store's disk use follows what it holds.
//
// Thread safety: thread-safe.
#ifndef SROUTE_SERVER_RECORD_STORE_H_
#define SROUTE_SERVER_RECORD_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "proto/rpc.pb.h"
#include "sswitch/io.h"
#include "util/mutex.h"

namespace rocksdb {
class DB;
class WriteBatch;
}  // namespace rocksdb

namespace sroute {

class RecordStore {
 public:
  // Opens or creates the store in `dir` for server `server_name`; refuses a
  // store that belongs to another server name. Records of an older store
  // that overlap are reduced as Put would have (one batch).
  static absl::StatusOr<std::unique_ptr<RecordStore>> Open(
      const std::string& dir, const std::string& server_name);
  ~RecordStore();

  // Stores every record in one atomic batch (written to RocksDB's log before
  // it returns, so a crash of the process loses none), with the cuts of the
  // older records they supersede.
  absl::Status Put(const std::vector<DelegateRuleRecord>& records);
  // Records of `sswitch` (every sSwitch's if empty) with seq > `after`,
  // oldest first, at most `limit` (0: all) except that the pieces of one
  // record are never split across two pages.
  absl::Status List(const std::string& sswitch, uint64_t after, uint32_t limit,
                    proto::RecordList* out) const;
  // Removes the records of `sswitch` with seq <= `up_to` (0: all of them),
  // only those with `anchor` if it is not empty; returns how many.
  absl::StatusOr<uint64_t> Forget(const std::string& sswitch, uint64_t up_to,
                                  const std::string& anchor = "");

  // How many records (pieces) the store holds; for tests and benchmarks.
  uint64_t CountForTesting() const;

 private:
  // One stored record (or piece) of a ranged rule.
  struct Piece {
    uint64_t end;
    uint64_t seq;
    std::string key;  // its RocksDB key
  };
  // Pieces of one group (sSwitch, anchor, pattern but for the range), by
  // start, disjoint.
  using Pieces = std::map<uint64_t, Piece>;
  // A change to the index, to undo if the batch does not land.
  struct Undo {
    std::string group;
    uint64_t start;
    bool had;  // whether `old` was there before
    Piece old;
  };

  explicit RecordStore(std::unique_ptr<rocksdb::DB> db);
  // Adds `record` (keyed `key`) to `batch`, with the cuts of the pieces it
  // supersedes, and to the index (changes logged in `undo`). `pending`
  // holds values put earlier in the same batch. `stored`: the record is in
  // the store already (the index is being rebuilt).
  // REQUIRES: write_mu_ held.
  absl::Status AddLocked(const DelegateRuleRecord& record,
                         const std::string& key, rocksdb::WriteBatch* batch,
                         absl::flat_hash_map<std::string, std::string>* pending,
                         std::vector<Undo>* undo, bool stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  std::string NewPieceKeyLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);
  void RestoreLocked(std::vector<Undo>& undo)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  // Writes one at a time. RocksDB would group concurrent writers itself,
  // with a leader copying the others' batches, but Debian's RocksDB is not
  // built with TSan, which then sees that copy as a race; the writes are
  // small and unsynced, so taking turns costs little. Also guards the
  // index, which must follow what was written. A leaf lock, held across a
  // write: that is its purpose.
  mutable Mutex write_mu_;
  absl::flat_hash_map<std::string, Pieces> ranged_ ABSL_GUARDED_BY(write_mu_);
  uint32_t next_piece_ ABSL_GUARDED_BY(write_mu_) = 1;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace sroute

#endif  // SROUTE_SERVER_RECORD_STORE_H_

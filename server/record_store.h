// RecordStore: a storage server's durable state in RocksDB: the
// delegate-rule records that arrive with IOs (DESIGN.md §5), by sSwitch and
// sequence number, and the server's identity.
//
// Thread safety: thread-safe.
#ifndef SROUTE_SERVER_RECORD_STORE_H_
#define SROUTE_SERVER_RECORD_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/rpc.pb.h"
#include "sswitch/io.h"
#include "util/mutex.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace sroute {

class RecordStore {
 public:
  // Opens or creates the store in `dir` for server `server_name`; refuses a
  // store that belongs to another server name.
  static absl::StatusOr<std::unique_ptr<RecordStore>> Open(
      const std::string& dir, const std::string& server_name);
  ~RecordStore();

  // Stores every record in one atomic batch (written to RocksDB's log before
  // it returns, so a crash of the process loses none).
  absl::Status Put(const std::vector<DelegateRuleRecord>& records);
  // Records of `sswitch` (every sSwitch's if empty) with seq > `after`,
  // oldest first, at most `limit` (0: all).
  absl::Status List(const std::string& sswitch, uint64_t after, uint32_t limit,
                    proto::RecordList* out) const;
  // Removes the records of `sswitch` with seq <= `up_to` (0: all of them),
  // only those with `anchor` if it is not empty; returns how many.
  absl::StatusOr<uint64_t> Forget(const std::string& sswitch, uint64_t up_to,
                                  const std::string& anchor = "");

 private:
  explicit RecordStore(std::unique_ptr<rocksdb::DB> db);
  // Writes one at a time. RocksDB would group concurrent writers itself,
  // with a leader copying the others' batches, but Debian's RocksDB is not
  // built with TSan, which then sees that copy as a race; the writes are
  // small and unsynced, so taking turns costs little. A leaf lock, held
  // across a write: that is its purpose.
  Mutex write_mu_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace sroute

#endif  // SROUTE_SERVER_RECORD_STORE_H_

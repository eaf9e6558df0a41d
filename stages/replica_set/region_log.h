// SPDX-License-Identifier: Apache-2.0
// RegionLog: a replica set's dirty-region log (issue 23), durable in a
// RocksDB of its own under the host's state directory: for each region of
// a file that may differ between members, which members are stale there
// and the region's version.
//
// The stage writes a region's record, synced, before the data of a change
// to it goes to any member (an md-style write intent), and again, synced,
// before it acknowledges a change some member failed; it removes the
// record, unsynced, once every member holds the region. A record found at
// start therefore names every region where members may differ: those it
// names stale certainly do; with `intent` set, a change was under way and
// the members not named may differ too.
//
// Keys: 'g' PATH '\0' REGION (8 bytes, big-endian). Past the regions of
// bytes, kWholeName is the name itself (its existence, type, attributes
// and every byte, and for a directory everything under it: a create,
// rename, unlink, ...), kAttrs its size and attributes (a truncate, chmod),
// kList a directory's listing.
//
// Thread safety: thread-safe; writes take turns (one at a time, each synced
// or not as asked), so a later write is never durable before an earlier one.
#ifndef SROUTE_STAGES_REPLICA_SET_REGION_LOG_H_
#define SROUTE_STAGES_REPLICA_SET_REGION_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "util/mutex.h"

namespace rocksdb {
class DB;
}  // namespace rocksdb

namespace sroute {

struct RegionRecord {
  // The region's name: the file's path in the set (no host) and its index.
  std::string path;
  uint64_t region = 0;
  // Raised by every change made to the region while a member is stale
  // there: what `sroutectl replicas status` shows for conflicting copies.
  uint64_t version = 0;
  // A change to the region may have been under way: members not named
  // stale may differ from one another too.
  bool intent = false;
  std::vector<std::string> stale;  // members that miss changes here
  // In RegionLog::Write: remove the record of `path` and `region`.
  bool removed = false;

  bool operator==(const RegionRecord&) const = default;
};

class RegionLog {
 public:
  // Region indexes that name more than bytes.
  static constexpr uint64_t kWholeName = UINT64_MAX;
  static constexpr uint64_t kList = UINT64_MAX - 1;
  static constexpr uint64_t kAttrs = UINT64_MAX - 2;  // size, mode, owner
  static constexpr uint64_t kFirstNamed = kAttrs;

  // Opens or creates the log in `dir` (made if missing, parents too).
  static absl::StatusOr<std::unique_ptr<RegionLog>> Open(
      const std::string& dir);
  ~RegionLog();

  // Every record, in key order.
  absl::StatusOr<std::vector<RegionRecord>> Load() const;
  // Writes (or removes) `records`, in order, in one atomic batch; with
  // `sync`, durable when it returns. ResourceExhausted for a full disk;
  // after a failed write, every later one fails too (fail-stop: nothing is
  // written that the log does not cover).
  absl::Status Write(const std::vector<RegionRecord>& records, bool sync);

 private:
  explicit RegionLog(std::unique_ptr<rocksdb::DB> db);
  Mutex write_mu_;  // a leaf, held across a write: writes take turns
  // Set by a failed write (a full disk): every later write fails with it.
  absl::Status broken_ ABSL_GUARDED_BY(write_mu_);
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace sroute

#endif  // SROUTE_STAGES_REPLICA_SET_REGION_LOG_H_

// A RocksDB call's status as an absl::Status, for the RocksDB stores (a
// server's RecordStore, a replica set's RegionLog): ResourceExhausted for
// a full disk (callers answer ENOSPC), Internal for anything else, each
// prefixed with what was being done. Header-only: util/ does not link
// RocksDB; its users do.
#ifndef SROUTE_UTIL_ROCKSDB_STATUS_H_
#define SROUTE_UTIL_ROCKSDB_STATUS_H_

#include <rocksdb/status.h>

#include <string>

#include "absl/status/status.h"
#include "util/strings.h"

namespace sroute {

inline absl::Status FromRocks(const rocksdb::Status& s,
                              const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(StrCat(what, ": ", s.ToString()));
  }
  return absl::InternalError(StrCat(what, ": ", s.ToString()));
}

}  // namespace sroute

#endif  // SROUTE_UTIL_ROCKSDB_STATUS_H_

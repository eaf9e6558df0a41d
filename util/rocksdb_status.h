// SPDX-License-Identifier: Apache-2.0
// For the RocksDB stores (a server's RecordStore, a replica set's
// RegionLog): a RocksDB call's status as an absl::Status (ResourceExhausted
// for a full disk, callers answer ENOSPC; Internal for anything else, each
// prefixed with what was being done), and RocksDB's info log in ours.
// Header-only: util/ does not link RocksDB; its users do.
#ifndef SROUTE_UTIL_ROCKSDB_STATUS_H_
#define SROUTE_UTIL_ROCKSDB_STATUS_H_

#include <rocksdb/env.h>
#include <rocksdb/status.h>

#include <cstdarg>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "util/log.h"
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

// RocksDB's info log in ours (warnings and worse) rather than in a LOG
// file beside the data: on a full disk RocksDB 7.8 appends again to a LOG
// file whose write failed and trips an assertion. Set it as
// Options::info_log of every store.
class RocksInfoToLog : public rocksdb::Logger {
 public:
  explicit RocksInfoToLog(std::string what)
      : rocksdb::Logger(rocksdb::InfoLogLevel::WARN_LEVEL),
        what_(std::move(what)) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[512];
    vsnprintf(line, sizeof line, format, ap);
    LogWarning(what_, " (RocksDB): ", line);
  }

 private:
  const std::string what_;
};

}  // namespace sroute

#endif  // SROUTE_UTIL_ROCKSDB_STATUS_H_

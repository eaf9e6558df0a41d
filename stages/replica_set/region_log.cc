// SPDX-License-Identifier: Apache-2.0
#include "stages/replica_set/region_log.h"

#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/write_batch.h>

#if defined(__SANITIZE_ADDRESS__)
#define SROUTE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SROUTE_ASAN 1
#endif
#endif
#ifdef SROUTE_ASAN
#include <sanitizer/lsan_interface.h>
#endif

#include "util/log.h"
#include "util/private_dir.h"
#include "util/rocksdb_status.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr char kRegionPrefix = 'g';

std::string Key(const std::string& path, uint64_t region) {
  std::string key;
  key.reserve(path.size() + 10);
  key.push_back(kRegionPrefix);
  key += path;
  key.push_back('\0');
  for (int shift = 56; shift >= 0; shift -= 8) {
    key.push_back(static_cast<char>(region >> shift));
  }
  return key;
}

// version (8 bytes, big-endian), intent (1 byte), then each stale member's
// name followed by '\n' (names hold no '\n': endpoint names).
std::string Value(const RegionRecord& r) {
  std::string v;
  for (int shift = 56; shift >= 0; shift -= 8) {
    v.push_back(static_cast<char>(r.version >> shift));
  }
  v.push_back(r.intent ? 1 : 0);
  for (const std::string& m : r.stale) {
    v += m;
    v.push_back('\n');
  }
  return v;
}

uint64_t BigEndian(const char* p) {
  uint64_t x = 0;
  for (int i = 0; i < 8; ++i) x = x << 8 | static_cast<unsigned char>(p[i]);
  return x;
}

bool Decode(const rocksdb::Slice& key, const rocksdb::Slice& value,
            RegionRecord* r) {
  if (key.size() < 10 || key[0] != kRegionPrefix ||
      key[key.size() - 9] != '\0' || value.size() < 9) {
    return false;
  }
  r->path.assign(key.data() + 1, key.size() - 10);
  r->region = BigEndian(key.data() + key.size() - 8);
  r->version = BigEndian(value.data());
  r->intent = value[8] != 0;
  r->stale.clear();
  size_t start = 9;
  for (size_t i = 9; i < value.size(); ++i) {
    if (value[i] == '\n') {
      r->stale.emplace_back(value.data() + start, i - start);
      start = i + 1;
    }
  }
  return start == value.size();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RegionLog>> RegionLog::Open(
    const std::string& dir) {
  if (absl::Status made = MakePrivateDirectories(dir); !made.ok()) {
    return absl::UnavailableError(
        StrCat("the region log's directory: ", made.message()));
  }
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 64;  // the fd limit is shared with the endpoints
  options.keep_log_file_num = 2;
  // No recovery of its own after a failed write: RocksDB 7.8's would sync
  // the failed log file again and trip an assertion (the log fail-stops;
  // see Write).
  options.max_bgerror_resume_count = 0;
  options.info_log = std::make_shared<RocksInfoToLog>("region log");
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    return absl::UnavailableError(
        StrCat("cannot open the region log in ", dir, ": ", s.ToString()));
  }
  return std::unique_ptr<RegionLog>(
      new RegionLog(std::unique_ptr<rocksdb::DB>(raw)));
}

RegionLog::RegionLog(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}

RegionLog::~RegionLog() {
  MutexLock l(&write_mu_);
  // Closing a RocksDB whose log write failed trips an assertion in
  // Debian's build: it is let go instead (the process's exit closes it).
  if (broken_.ok()) return;
  rocksdb::DB* leaked = db_.release();
#ifdef SROUTE_ASAN
  __lsan_ignore_object(leaked);  // on purpose, above
#else
  (void)leaked;
#endif
}

absl::StatusOr<std::vector<RegionRecord>> RegionLog::Load() const {
  std::vector<RegionRecord> out;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, kRegionPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    RegionRecord r;
    if (!Decode(it->key(), it->value(), &r)) {
      return absl::DataLossError(
          StrCat("region log: a record that does not decode (key of ",
                 it->key().size(), " bytes)"));
    }
    out.push_back(std::move(r));
  }
  if (absl::Status s = FromRocks(it->status(), "region log"); !s.ok()) {
    return s;
  }
  return out;
}

absl::Status RegionLog::Write(const std::vector<RegionRecord>& records,
                              bool sync) {
  rocksdb::WriteBatch batch;
  for (const RegionRecord& r : records) {
    if (r.removed) {
      batch.Delete(Key(r.path, r.region));
    } else {
      batch.Put(Key(r.path, r.region), Value(r));
    }
  }
  rocksdb::WriteOptions options;
  options.sync = sync;
  MutexLock l(&write_mu_);
  if (!broken_.ok()) return broken_;
  absl::Status s = FromRocks(db_->Write(options, &batch), "region log");
  if (!s.ok()) {
    // RocksDB (7.8) cannot take its write-ahead log up again after a
    // failed write: the log refuses every later one, and the host is
    // restarted once there is room.
    broken_ = absl::Status(s.code(), StrCat(s.message(),
                                            " (the log takes no more writes: "
                                            "restart once there is room)"));
  }
  return s;
}

}  // namespace sroute

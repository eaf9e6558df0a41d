// SPDX-License-Identifier: Apache-2.0
// KvStore on RocksDB: one controller's state in a local directory.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "controller/kv.h"
#include "util/mutex.h"
#include "util/private_dir.h"
#include "util/strings.h"

namespace sroute {
namespace {

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(StrCat(what, ": ", s.ToString()));
  }
  return absl::InternalError(StrCat(what, ": ", s.ToString()));
}

class RocksDbKv : public KvStore {
 public:
  RocksDbKv(std::unique_ptr<rocksdb::DB> db, std::string dir)
      : db_(std::move(db)), dir_(std::move(dir)) {}

  absl::StatusOr<std::optional<std::string>> Get(
      const std::string& key) const override {
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &v);
    if (s.IsNotFound()) return std::nullopt;
    if (!s.ok()) return FromRocks(s, "reading the controller database");
    return v;
  }

  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> Scan(
      const std::string& prefix, bool keys_only) const override {
    std::vector<std::pair<std::string, std::string>> out;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->NewIterator(rocksdb::ReadOptions()));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
         it->Next()) {
      out.emplace_back(it->key().ToString(),
                       keys_only ? std::string() : it->value().ToString());
    }
    if (absl::Status s = FromRocks(it->status(),
                                   "scanning the controller "
                                   "database");
        !s.ok()) {
      return s;
    }
    return out;
  }

  absl::Status Apply(const std::vector<Write>& writes, bool durable) override {
    rocksdb::WriteBatch batch;
    for (const Write& w : writes) {
      if (w.value) {
        batch.Put(w.key, *w.value);
      } else {
        batch.Delete(w.key);
      }
    }
    rocksdb::WriteOptions o;
    o.sync = durable;  // the controller's word must survive a power cut
    MutexLock l(&mu_);
    return FromRocks(db_->Write(o, &batch), "writing the controller database");
  }

  std::string Describe() const override { return "rocksdb:" + dir_; }

 private:
  std::unique_ptr<rocksdb::DB> db_;
  const std::string dir_;
  // Serializes writes. RocksDB would group concurrent writers itself, with
  // a leader copying the others' batches, but Debian's RocksDB is not built
  // with TSan, which then sees that copy as a race; the controller writes
  // rarely. Held across the (synced) write. A leaf.
  Mutex mu_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<KvStore>> OpenRocksDbKv(const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 4;
  // The rules and the topology name files and hosts: the owner's only.
  if (absl::Status made = MakePrivateDirectories(dir); !made.ok()) {
    return absl::UnavailableError(StrCat(
        "cannot open the controller database in ", dir, ": ", made.message()));
  }
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    return absl::UnavailableError(StrCat(
        "cannot open the controller database in ", dir, ": ", s.ToString()));
  }
  return std::make_unique<RocksDbKv>(std::unique_ptr<rocksdb::DB>(raw), dir);
}

}  // namespace sroute

#include "server/record_store.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "util/rocksdb_status.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr char kRecordPrefix = 'r';
const char kNameKey[] = "m/server-name";

std::string RecordKey(const std::string& sswitch, uint64_t seq) {
  std::string key;
  key.reserve(sswitch.size() + 10);
  key.push_back(kRecordPrefix);
  key += sswitch;
  key.push_back('\0');
  for (int shift = 56; shift >= 0; shift -= 8) {
    key.push_back(static_cast<char>(seq >> shift));
  }
  return key;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecordStore>> RecordStore::Open(
    const std::string& dir, const std::string& server_name) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 256;  // the fd limit is shared with the endpoint
  options.keep_log_file_num = 4;
  options.info_log = std::make_shared<RocksInfoToLog>("state store");
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    return absl::UnavailableError(
        StrCat("cannot open the state store in ", dir, ": ", s.ToString()));
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  std::string owner;
  s = db->Get(rocksdb::ReadOptions(), kNameKey, &owner);
  if (s.IsNotFound()) {
    rocksdb::WriteOptions w;
    w.sync = true;
    if (absl::Status p = FromRocks(db->Put(w, kNameKey, server_name),
                                   StrCat("state store ", dir));
        !p.ok()) {
      return p;
    }
  } else if (!s.ok()) {
    return FromRocks(s, StrCat("state store ", dir));
  } else if (owner != server_name) {
    return absl::FailedPreconditionError(StrCat("state store ", dir,
                                                " belongs to server '", owner,
                                                "', not '", server_name, "'"));
  }
  return std::unique_ptr<RecordStore>(new RecordStore(std::move(db)));
}

RecordStore::RecordStore(std::unique_ptr<rocksdb::DB> db)
    : db_(std::move(db)) {}

RecordStore::~RecordStore() = default;

absl::Status RecordStore::Put(const std::vector<DelegateRuleRecord>& records) {
  rocksdb::WriteBatch batch;
  proto::DelegateRecord msg;
  std::string value;
  for (const DelegateRuleRecord& r : records) {
    if (r.sswitch.empty() || r.sswitch.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat("bad sSwitch name in a delegate record: '", r.sswitch, "'"));
    }
    msg.set_sswitch(r.sswitch);
    msg.set_seq(r.seq);
    msg.set_rule(r.rule);
    msg.set_anchor(r.anchor);
    value.clear();
    msg.SerializeToString(&value);
    batch.Put(RecordKey(r.sswitch, r.seq), value);
  }
  MutexLock l(&write_mu_);
  return FromRocks(db_->Write(rocksdb::WriteOptions(), &batch),
                   "storing delegate records");
}

absl::Status RecordStore::List(const std::string& sswitch, uint64_t after,
                               uint32_t limit, proto::RecordList* out) const {
  std::string prefix(1, kRecordPrefix);
  if (!sswitch.empty()) {
    prefix += sswitch;
    prefix.push_back('\0');
  }
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  it->Seek(sswitch.empty() ? prefix : RecordKey(sswitch, after + 1));
  for (; it->Valid() && it->key().starts_with(prefix); it->Next()) {
    proto::DelegateRecord r;
    if (!r.ParseFromArray(it->value().data(),
                          static_cast<int>(it->value().size()))) {
      return absl::DataLossError(
          StrCat("a stored delegate record does not parse (key of ",
                 it->key().size(), " bytes)"));
    }
    if (r.seq() <= after) continue;
    if (limit > 0 && static_cast<uint32_t>(out->records_size()) >= limit) {
      out->set_more(true);
      break;
    }
    *out->add_records() = std::move(r);
  }
  return FromRocks(it->status(), "listing delegate records");
}

absl::StatusOr<uint64_t> RecordStore::Forget(const std::string& sswitch,
                                             uint64_t up_to,
                                             const std::string& anchor) {
  if (sswitch.empty()) {
    return absl::InvalidArgumentError("forget needs an sSwitch name");
  }
  std::string prefix(1, kRecordPrefix);
  prefix += sswitch;
  prefix.push_back('\0');
  rocksdb::WriteBatch batch;
  uint64_t n = 0;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  const std::string end =
      up_to == 0 ? std::string() : RecordKey(sswitch, up_to);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    if (!end.empty() && it->key().compare(end) > 0) break;
    if (!anchor.empty()) {
      proto::DelegateRecord r;
      if (r.ParseFromArray(it->value().data(),
                           static_cast<int>(it->value().size())) &&
          r.anchor() != anchor) {
        continue;
      }
    }
    batch.Delete(it->key());
    ++n;
  }
  if (absl::Status s = FromRocks(it->status(), "forgetting records"); !s.ok()) {
    return s;
  }
  {
    MutexLock l(&write_mu_);
    if (absl::Status s = FromRocks(db_->Write(rocksdb::WriteOptions(), &batch),
                                   "forgetting records");
        !s.ok()) {
      return s;
    }
  }
  return n;
}

}  // namespace sroute

#include "controller/store.h"

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <set>

#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

// Keys:
//   "k/NAME"                  a counter (u64 big-endian)
//   "r/SSWITCH\0CID"          a managed rule (ManagedRule)
//   "i/CID"                   the sSwitch of a cid
//   "h/SSWITCH"               a host as it last registered (HostInfo)
//   "a/APP\0KEY"              control application state
//   "s/SSWITCH\0NAME"         a stage the controller manages (StageConfig)
constexpr char kNextCid[] = "k/next-cid";
constexpr char kVersion[] = "k/version";
constexpr char kEpoch[] = "k/epoch";

std::string U64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (56 - 8 * i));
  return s;
}

uint64_t FromU64(std::string_view s) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < s.size(); ++i) {
    v = (v << 8) | static_cast<unsigned char>(s[i]);
  }
  return v;
}

std::string RulePrefix(const std::string& sswitch) {
  std::string k = "r/" + sswitch;
  k.push_back('\0');
  return k;
}

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(StrCat(what, ": ", s.ToString()));
  }
  return absl::InternalError(StrCat(what, ": ", s.ToString()));
}

rocksdb::WriteOptions Synced() {
  rocksdb::WriteOptions w;
  w.sync = true;  // the controller's word must survive a power cut
  return w;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ControllerStore>> ControllerStore::Open(
    const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 4;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    return absl::UnavailableError(StrCat(
        "cannot open the controller database in ", dir, ": ", s.ToString()));
  }
  return std::unique_ptr<ControllerStore>(
      new ControllerStore(std::unique_ptr<rocksdb::DB>(raw)));
}

ControllerStore::ControllerStore(std::unique_ptr<rocksdb::DB> db)
    : db_(std::move(db)) {}

ControllerStore::~ControllerStore() = default;

absl::StatusOr<uint64_t> ControllerStore::GetCounter(
    const std::string& key) const {
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), key, &v);
  if (s.IsNotFound()) return 0;
  if (!s.ok()) return FromRocks(s, key);
  return FromU64(v);
}

absl::StatusOr<uint64_t> ControllerStore::NextCids(size_t n) {
  MutexLock l(&mu_);
  auto next = GetCounter(kNextCid);
  if (!next.ok()) return next.status();
  const uint64_t first = std::max<uint64_t>(*next, 1);
  // Not synced on its own: the Apply that uses these ids is, and a synced
  // write makes every earlier one durable too. Ids reserved by a change
  // that never got persisted may be handed out again after a crash, which
  // is harmless: nobody saw them.
  if (absl::Status s =
          FromRocks(db_->Put(rocksdb::WriteOptions(), kNextCid, U64(first + n)),
                    "reserving rule ids");
      !s.ok()) {
    return s;
  }
  return first;
}

absl::Status ControllerStore::Apply(const std::vector<RuleChange>& changes,
                                    uint64_t version) {
  rocksdb::WriteBatch batch;
  std::string value;
  for (const RuleChange& c : changes) {
    const std::string prefix = RulePrefix(c.sswitch);
    for (uint64_t cid : c.remove) {
      batch.Delete(prefix + U64(cid));
      batch.Delete("i/" + U64(cid));
    }
    for (const proto::ManagedRule& r : c.insert) {
      value.clear();
      r.SerializeToString(&value);
      batch.Put(prefix + U64(r.cid()), value);
      batch.Put("i/" + U64(r.cid()), c.sswitch);
    }
  }
  batch.Put(kVersion, U64(version));
  MutexLock l(&mu_);
  return FromRocks(db_->Write(Synced(), &batch), "storing rules");
}

absl::StatusOr<std::vector<proto::ManagedRule>> ControllerStore::Rules(
    const std::string& sswitch) const {
  std::vector<proto::ManagedRule> out;
  const std::string prefix = RulePrefix(sswitch);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    proto::ManagedRule r;
    if (!r.ParseFromArray(it->value().data(),
                          static_cast<int>(it->value().size()))) {
      return absl::DataLossError(
          StrCat("a stored rule of ", sswitch, " does not parse"));
    }
    out.push_back(std::move(r));
  }
  if (absl::Status s = FromRocks(it->status(), "listing rules"); !s.ok()) {
    return s;
  }
  return out;
}

std::vector<std::string> ControllerStore::SSwitches() const {
  std::set<std::string> names;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("r/"); it->Valid() && it->key().starts_with("r/");) {
    const std::string key = it->key().ToString();
    const size_t nul = key.find('\0', 2);
    if (nul == std::string::npos) break;
    names.insert(key.substr(2, nul - 2));
    // Skip the rest of this sSwitch's rules.
    std::string next = key.substr(0, nul);
    next.push_back('\1');
    it->Seek(next);
  }
  for (it->Seek("h/"); it->Valid() && it->key().starts_with("h/"); it->Next()) {
    names.insert(it->key().ToString().substr(2));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

std::optional<std::string> ControllerStore::SSwitchOf(uint64_t cid) const {
  std::string v;
  if (!db_->Get(rocksdb::ReadOptions(), "i/" + U64(cid), &v).ok()) {
    return std::nullopt;
  }
  return v;
}

bool ControllerStore::Known(const std::string& sswitch) const {
  std::string v;
  if (db_->Get(rocksdb::ReadOptions(), "h/" + sswitch, &v).ok()) return true;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix = RulePrefix(sswitch);
  it->Seek(prefix);
  return it->Valid() && it->key().starts_with(prefix);
}

absl::Status ControllerStore::PutHost(const proto::HostInfo& host) {
  MutexLock l(&mu_);
  return FromRocks(
      db_->Put(Synced(), "h/" + host.sswitch(), host.SerializeAsString()),
      "storing the topology");
}

std::vector<proto::HostInfo> ControllerStore::Hosts() const {
  std::vector<proto::HostInfo> out;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("h/"); it->Valid() && it->key().starts_with("h/"); it->Next()) {
    proto::HostInfo h;
    if (h.ParseFromArray(it->value().data(),
                         static_cast<int>(it->value().size()))) {
      out.push_back(std::move(h));
    }
  }
  return out;
}

namespace {
std::string StagePrefix(const std::string& sswitch) {
  std::string k = "s/" + sswitch;
  k.push_back('\0');
  return k;
}
}  // namespace

absl::Status ControllerStore::PutStage(const std::string& sswitch,
                                       const proto::StageConfig& stage) {
  MutexLock l(&mu_);
  return FromRocks(db_->Put(Synced(), StagePrefix(sswitch) + stage.name(),
                            stage.SerializeAsString()),
                   "storing a stage");
}

absl::Status ControllerStore::DeleteStage(const std::string& sswitch,
                                          const std::string& name) {
  MutexLock l(&mu_);
  return FromRocks(db_->Delete(Synced(), StagePrefix(sswitch) + name),
                   "deleting a stage");
}

std::vector<proto::StageConfig> ControllerStore::Stages(
    const std::string& sswitch) const {
  std::vector<proto::StageConfig> out;
  const std::string prefix = StagePrefix(sswitch);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    proto::StageConfig st;
    if (st.ParseFromArray(it->value().data(),
                          static_cast<int>(it->value().size()))) {
      out.push_back(std::move(st));
    }
  }
  return out;
}

absl::Status ControllerStore::PutAppState(const std::string& app,
                                          const std::string& key,
                                          const std::string& value) {
  std::string k = "a/" + app;
  k.push_back('\0');
  k += key;
  MutexLock l(&mu_);
  return FromRocks(db_->Put(Synced(), k, value), "storing app state");
}

absl::StatusOr<std::string> ControllerStore::GetAppState(
    const std::string& app, const std::string& key) const {
  std::string k = "a/" + app;
  k.push_back('\0');
  k += key;
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), k, &v);
  if (s.IsNotFound()) {
    return absl::NotFoundError(StrCat("no state '", key, "' for app ", app));
  }
  if (!s.ok()) return FromRocks(s, "reading app state");
  return v;
}

uint64_t ControllerStore::version() const {
  auto v = GetCounter(kVersion);
  return v.ok() ? *v : 0;
}

absl::StatusOr<uint64_t> ControllerStore::NextEpoch() {
  MutexLock l(&mu_);
  auto e = GetCounter(kEpoch);
  if (!e.ok()) return e.status();
  if (absl::Status s =
          FromRocks(db_->Put(Synced(), kEpoch, U64(*e + 1)), "epoch");
      !s.ok()) {
    return s;
  }
  return *e + 1;
}

}  // namespace sroute

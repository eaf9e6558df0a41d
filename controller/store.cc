// SPDX-License-Identifier: Apache-2.0
#include "controller/store.h"

#include <algorithm>
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

std::string WithNul(std::string_view kind, const std::string& name) {
  std::string k = StrCat(kind, name);
  k.push_back('\0');
  return k;
}

std::string RulePrefix(const std::string& sswitch) {
  return WithNul("r/", sswitch);
}
std::string StagePrefix(const std::string& sswitch) {
  return WithNul("s/", sswitch);
}
std::string AppKey(const std::string& app, const std::string& key) {
  return WithNul("a/", app) + key;
}

using Write = KvStore::Write;

}  // namespace

absl::StatusOr<std::unique_ptr<ControllerStore>> ControllerStore::Open(
    const std::string& dir) {
  auto kv = OpenRocksDbKv(dir);
  if (!kv.ok()) return kv.status();
  return Open(*std::move(kv));
}

absl::StatusOr<std::unique_ptr<ControllerStore>> ControllerStore::Open(
    std::unique_ptr<KvStore> kv) {
  std::unique_ptr<ControllerStore> store(new ControllerStore(std::move(kv)));
  if (absl::Status s = store->Reload(); !s.ok()) return s;
  return store;
}

ControllerStore::ControllerStore(std::unique_ptr<KvStore> kv)
    : kv_(std::move(kv)) {}

ControllerStore::~ControllerStore() = default;

absl::Status ControllerStore::Reload() {
  if (absl::Status s = kv_->Refresh(); !s.ok()) return s;
  auto v = GetCounter(kVersion);
  if (!v.ok()) return v.status();
  auto next = GetCounter(kNextCid);
  if (!next.ok()) return next.status();
  MutexLock l(&mu_);
  version_.store(*v);
  next_cid_ = std::max<uint64_t>(*next, 1);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> ControllerStore::GetCounter(
    const std::string& key) const {
  auto v = kv_->Get(key);
  if (!v.ok()) return v.status();
  return *v ? FromU64(**v) : 0;
}

absl::StatusOr<uint64_t> ControllerStore::NextCids(size_t n) {
  // In memory: only the leader hands out ids, and the Apply that stores
  // rules with them stores the counter in the same write. Ids reserved by a
  // change that was never stored may be handed out again by a controller
  // that starts (or takes over) later, which is harmless: nobody saw them.
  MutexLock l(&mu_);
  const uint64_t first = next_cid_;
  next_cid_ += n;
  return first;
}

absl::Status ControllerStore::Apply(const std::vector<RuleChange>& changes,
                                    uint64_t version) {
  std::vector<Write> writes;
  for (const RuleChange& c : changes) {
    const std::string prefix = RulePrefix(c.sswitch);
    for (uint64_t cid : c.remove) {
      writes.push_back(Write{prefix + U64(cid), std::nullopt});
      writes.push_back(Write{"i/" + U64(cid), std::nullopt});
    }
    for (const proto::ManagedRule& r : c.insert) {
      writes.push_back(Write{prefix + U64(r.cid()), r.SerializeAsString()});
      writes.push_back(Write{"i/" + U64(r.cid()), c.sswitch});
    }
  }
  writes.push_back(Write{kVersion, U64(version)});
  MutexLock l(&mu_);
  writes.push_back(Write{kNextCid, U64(next_cid_)});
  if (absl::Status s = kv_->Apply(writes); !s.ok()) {
    return absl::Status(s.code(), StrCat("storing rules: ", s.message()));
  }
  version_.store(version);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<proto::ManagedRule>> ControllerStore::Rules(
    const std::string& sswitch) const {
  auto kvs = kv_->Scan(RulePrefix(sswitch));
  if (!kvs.ok()) return kvs.status();
  std::vector<proto::ManagedRule> out;
  for (const auto& [key, value] : *kvs) {
    proto::ManagedRule r;
    if (!r.ParseFromString(value)) {
      return absl::DataLossError(
          StrCat("a stored rule of ", sswitch, " does not parse"));
    }
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ControllerStore::SSwitches() const {
  std::set<std::string> names;
  auto rules = kv_->Scan("r/", /*keys_only=*/true);
  if (!rules.ok()) return rules.status();
  for (const auto& [key, unused] : *rules) {
    const size_t nul = key.find('\0', 2);
    if (nul != std::string::npos) names.insert(key.substr(2, nul - 2));
  }
  auto hosts = kv_->Scan("h/", /*keys_only=*/true);
  if (!hosts.ok()) return hosts.status();
  for (const auto& [key, unused] : *hosts) names.insert(key.substr(2));
  return std::vector<std::string>(names.begin(), names.end());
}

absl::StatusOr<std::optional<std::string>> ControllerStore::SSwitchOf(
    uint64_t cid) const {
  return kv_->Get("i/" + U64(cid));
}

absl::StatusOr<bool> ControllerStore::Known(const std::string& sswitch) const {
  auto host = kv_->Get("h/" + sswitch);
  if (!host.ok()) return host.status();
  if (*host) return true;
  auto rules = kv_->Scan(RulePrefix(sswitch), /*keys_only=*/true);
  if (!rules.ok()) return rules.status();
  return !rules->empty();
}

absl::Status ControllerStore::PutHost(const proto::HostInfo& host) {
  MutexLock l(&mu_);
  absl::Status s =
      kv_->Apply({Write{"h/" + host.sswitch(), host.SerializeAsString()}});
  if (!s.ok()) {
    return absl::Status(s.code(),
                        StrCat("storing the topology: ", s.message()));
  }
  return s;
}

absl::StatusOr<std::vector<proto::HostInfo>> ControllerStore::Hosts() const {
  auto kvs = kv_->Scan("h/");
  if (!kvs.ok()) return kvs.status();
  std::vector<proto::HostInfo> out;
  for (const auto& [key, value] : *kvs) {
    proto::HostInfo h;
    if (h.ParseFromString(value)) out.push_back(std::move(h));
  }
  return out;
}

absl::Status ControllerStore::PutStage(const std::string& sswitch,
                                       const proto::StageConfig& stage) {
  MutexLock l(&mu_);
  absl::Status s = kv_->Apply(
      {Write{StagePrefix(sswitch) + stage.name(), stage.SerializeAsString()}});
  if (!s.ok()) {
    return absl::Status(s.code(), StrCat("storing a stage: ", s.message()));
  }
  return s;
}

absl::Status ControllerStore::DeleteStage(const std::string& sswitch,
                                          const std::string& name) {
  MutexLock l(&mu_);
  absl::Status s =
      kv_->Apply({Write{StagePrefix(sswitch) + name, std::nullopt}});
  if (!s.ok()) {
    return absl::Status(s.code(), StrCat("deleting a stage: ", s.message()));
  }
  return s;
}

absl::StatusOr<std::vector<proto::StageConfig>> ControllerStore::Stages(
    const std::string& sswitch) const {
  auto kvs = kv_->Scan(StagePrefix(sswitch));
  if (!kvs.ok()) return kvs.status();
  std::vector<proto::StageConfig> out;
  for (const auto& [key, value] : *kvs) {
    proto::StageConfig st;
    if (st.ParseFromString(value)) out.push_back(std::move(st));
  }
  return out;
}

absl::Status ControllerStore::PutAppState(const std::string& app,
                                          const std::string& key,
                                          const std::string& value) {
  MutexLock l(&mu_);
  absl::Status s = kv_->Apply({Write{AppKey(app, key), value}});
  if (!s.ok()) {
    return absl::Status(s.code(), StrCat("storing app state: ", s.message()));
  }
  return s;
}

absl::StatusOr<std::string> ControllerStore::GetAppState(
    const std::string& app, const std::string& key) const {
  auto v = kv_->Get(AppKey(app, key));
  if (!v.ok()) {
    return absl::Status(v.status().code(),
                        StrCat("reading app state: ", v.status().message()));
  }
  if (!*v) {
    return absl::NotFoundError(StrCat("no state '", key, "' for app ", app));
  }
  return **v;
}

uint64_t ControllerStore::version() const { return version_.load(); }

absl::StatusOr<uint64_t> ControllerStore::NextEpoch() {
  MutexLock l(&mu_);
  auto e = GetCounter(kEpoch);
  if (!e.ok()) return e.status();
  if (absl::Status s = kv_->Apply({Write{kEpoch, U64(*e + 1)}}); !s.ok()) {
    return absl::Status(s.code(), StrCat("epoch: ", s.message()));
  }
  return *e + 1;
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
#include "server/record_store.h"

#include <rocksdb/db.h>
#include <rocksdb/utilities/table_properties_collectors.h>
#include <rocksdb/write_batch.h>

#include <algorithm>

#include "rules/parser.h"
#include "util/private_dir.h"
#include "util/rocksdb_status.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr char kRecordPrefix = 'r';
const char kNameKey[] = "m/server-name";
constexpr size_t kSeqBytes = 8;
constexpr size_t kPieceBytes = 4;

std::string SSwitchPrefix(const std::string& sswitch) {
  std::string key;
  key.reserve(sswitch.size() + 2 + kSeqBytes + kPieceBytes);
  key.push_back(kRecordPrefix);
  key += sswitch;
  key.push_back('\0');
  return key;
}

void AppendBigEndian(std::string* out, uint64_t v, size_t bytes) {
  for (int shift = static_cast<int>(bytes - 1) * 8; shift >= 0; shift -= 8) {
    out->push_back(static_cast<char>(v >> shift));
  }
}

uint64_t ReadBigEndian(std::string_view in) {
  uint64_t v = 0;
  for (char c : in) v = (v << 8) | static_cast<unsigned char>(c);
  return v;
}

// A record's key: its sSwitch, its seq, and for a piece past the first of
// a cut record a piece number (pieces of one record sort together).
std::string RecordKey(const std::string& sswitch, uint64_t seq) {
  std::string key = SSwitchPrefix(sswitch);
  AppendBigEndian(&key, seq, kSeqBytes);
  return key;
}

// Piece `piece` of the record keyed `key` (a record's key, or one of its
// pieces'): the record's key without any piece number, and `piece`.
std::string PieceKey(std::string key, uint32_t piece) {
  key.resize(key.find('\0') + 1 + kSeqBytes);
  AppendBigEndian(&key, piece, kPieceBytes);
  return key;
}

// The rule of a record that names one exact file with a byte range, or
// nothing.
std::optional<Rule> RangedRule(const std::string& text) {
  auto rule = ParseRule(text);
  if (!rule.ok()) return std::nullopt;
  const FilePattern& f = rule->pattern.file;
  if (f.kind != FilePattern::Kind::kExact || !f.range ||
      f.range->start >= f.range->end) {
    return std::nullopt;
  }
  return *std::move(rule);
}

// Records supersede each other within a group: same sSwitch, same anchor,
// same pattern but for the byte range.
std::string GroupOf(const std::string& sswitch, const std::string& anchor,
                    const Rule& rule) {
  HeaderPattern p = rule.pattern;
  p.file.range.reset();
  return StrCat(sswitch, std::string_view("\0", 1), anchor,
                std::string_view("\0", 1), FormatPattern(p));
}

std::string Serialize(const DelegateRuleRecord& r) {
  proto::DelegateRecord msg;
  msg.set_sswitch(r.sswitch);
  msg.set_seq(r.seq);
  msg.set_rule(r.rule);
  msg.set_anchor(r.anchor);
  std::string value;
  msg.SerializeToString(&value);
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RecordStore>> RecordStore::Open(
    const std::string& dir, const std::string& server_name) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 256;  // the fd limit is shared with the endpoint
  options.keep_log_file_num = 4;
  options.info_log = std::make_shared<RocksInfoToLog>("state store");
  // The store holds little (records proportional to distinct ranges) but
  // may see many cuts: a small write buffer keeps the log and level 0
  // small, and files where deletions pile up are compacted early.
  options.write_buffer_size = 1 << 20;
  options.max_total_wal_size = 4 << 20;
  options.level0_file_num_compaction_trigger = 2;
  options.max_bytes_for_level_base = 4 << 20;
  options.target_file_size_base = 1 << 20;
  options.table_properties_collector_factories.emplace_back(
      rocksdb::NewCompactOnDeletionCollectorFactory(1024, 256));
  // RocksDB would make the folder itself (readable by all, after
  // complaining in its log that it cannot list it): the records name files.
  if (absl::Status made = MakePrivateDirectories(dir); !made.ok()) {
    return absl::UnavailableError(
        StrCat("cannot open the state store in ", dir, ": ", made.message()));
  }
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
  std::unique_ptr<RecordStore> store(new RecordStore(std::move(db)));
  // Rebuild the index; a store written before records superseded each
  // other is reduced on the way.
  MutexLock l(&store->write_mu_);
  rocksdb::WriteBatch batch;
  absl::flat_hash_map<std::string, std::string> pending;
  std::vector<Undo> undo;
  std::unique_ptr<rocksdb::Iterator> it(
      store->db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, kRecordPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const std::string key = it->key().ToString();
    if (key.size() >= kPieceBytes + kSeqBytes + 2) {
      const size_t nul = key.find('\0');
      if (nul != std::string::npos &&
          key.size() == nul + 1 + kSeqBytes + kPieceBytes) {
        const uint64_t piece =
            ReadBigEndian(std::string_view(key).substr(nul + 1 + kSeqBytes));
        store->next_piece_ = std::max<uint32_t>(
            store->next_piece_, static_cast<uint32_t>(piece) + 1);
      }
    }
    proto::DelegateRecord r;
    if (!r.ParseFromArray(it->value().data(),
                          static_cast<int>(it->value().size()))) {
      continue;  // List reports it
    }
    DelegateRuleRecord rec{r.sswitch(), r.seq(), r.rule(), r.anchor()};
    if (absl::Status a =
            store->AddLocked(rec, key, &batch, &pending, &undo, true);
        !a.ok()) {
      return a;
    }
  }
  if (absl::Status st = FromRocks(it->status(), StrCat("state store ", dir));
      !st.ok()) {
    return st;
  }
  if (batch.Count() > 0) {
    if (absl::Status w =
            FromRocks(store->db_->Write(rocksdb::WriteOptions(), &batch),
                      StrCat("reducing the records of state store ", dir));
        !w.ok()) {
      return w;
    }
  }
  return store;
}

RecordStore::RecordStore(std::unique_ptr<rocksdb::DB> db)
    : db_(std::move(db)) {}

RecordStore::~RecordStore() = default;

std::string RecordStore::NewPieceKeyLocked(const std::string& key) {
  return PieceKey(key, next_piece_++);
}

absl::Status RecordStore::AddLocked(
    const DelegateRuleRecord& record, const std::string& key,
    rocksdb::WriteBatch* batch,
    absl::flat_hash_map<std::string, std::string>* pending,
    std::vector<Undo>* undo, bool stored) {
  auto put = [&](const std::string& k, std::string value) {
    batch->Put(k, value);
    (*pending)[k] = std::move(value);
  };
  std::optional<Rule> rule = RangedRule(record.rule);
  if (!rule) {
    if (!stored) put(key, Serialize(record));
    return absl::OkStatus();
  }
  const std::string group = GroupOf(record.sswitch, record.anchor, *rule);
  Pieces& pieces = ranged_[group];
  auto set = [&](uint64_t start, Piece p) {
    auto at = pieces.find(start);
    if (at != pieces.end()) {
      undo->push_back({group, start, true, at->second});
      at->second = std::move(p);
    } else {
      undo->push_back({group, start, false, {}});
      pieces.emplace(start, std::move(p));
    }
  };
  // The stored value of `k` with its rule's range set to [a, b).
  auto with_range = [&](const std::string& k, uint64_t a,
                        uint64_t b) -> absl::StatusOr<std::string> {
    std::string value;
    if (auto p = pending->find(k); p != pending->end()) {
      value = p->second;
    } else if (absl::Status g =
                   FromRocks(db_->Get(rocksdb::ReadOptions(), k, &value),
                             "reading a delegate record to cut it");
               !g.ok()) {
      return g;
    }
    proto::DelegateRecord msg;
    if (!msg.ParseFromString(value)) {
      return absl::DataLossError("a stored delegate record does not parse");
    }
    std::optional<Rule> r = RangedRule(msg.rule());
    if (!r) {
      return absl::DataLossError(
          StrCat("a stored ranged record is not ranged: ", msg.rule()));
    }
    r->pattern.file.range = ByteRange{a, b};
    msg.set_rule(FormatRule(*r));
    std::string out;
    msg.SerializeToString(&out);
    return out;
  };

  const uint64_t a = rule->pattern.file.range->start;
  const uint64_t b = rule->pattern.file.range->end;
  // Bytes of [a, b) that newer records hold already, in order.
  std::vector<std::pair<uint64_t, uint64_t>> newer;
  auto it = pieces.upper_bound(a);
  if (it != pieces.begin() && std::prev(it)->second.end > a) --it;
  while (it != pieces.end() && it->first < b) {
    const uint64_t s = it->first;
    const Piece old = it->second;
    if (old.seq > record.seq || old.key == key) {
      newer.emplace_back(std::max(s, a), std::min(old.end, b));
      ++it;
      continue;
    }
    undo->push_back({group, s, true, old});
    it = pieces.erase(it);
    bool kept_key = false;
    if (s < a) {
      auto v = with_range(old.key, s, a);
      if (!v.ok()) return v.status();
      put(old.key, *std::move(v));
      set(s, Piece{a, old.seq, old.key});
      kept_key = true;
    }
    if (old.end > b) {
      const std::string k = kept_key ? NewPieceKeyLocked(old.key) : old.key;
      auto v = with_range(old.key, b, old.end);
      if (!v.ok()) return v.status();
      put(k, *std::move(v));
      set(b, Piece{old.end, old.seq, k});
      kept_key = true;
    }
    if (!kept_key) {
      batch->Delete(old.key);
      pending->erase(old.key);
    }
    it = pieces.upper_bound(s);
  }
  // The new record keeps what no newer one holds.
  bool first = true;
  // The piece counter taken here, with the lock held: the analysis does not
  // follow a lock into a lambda.
  uint32_t* next_piece = &next_piece_;
  auto emit = [&](uint64_t x, uint64_t y) -> absl::Status {
    const std::string k = first ? key : PieceKey(key, (*next_piece)++);
    first = false;
    if (x == a && y == b) {
      if (!stored) put(k, Serialize(record));
    } else {
      Rule cut = *rule;
      cut.pattern.file.range = ByteRange{x, y};
      DelegateRuleRecord piece = record;
      piece.rule = FormatRule(cut);
      put(k, Serialize(piece));
    }
    set(x, Piece{y, record.seq, k});
    return absl::OkStatus();
  };
  uint64_t pos = a;
  for (const auto& [x, y] : newer) {
    if (x > pos) {
      if (absl::Status e = emit(pos, x); !e.ok()) return e;
    }
    pos = std::max(pos, y);
  }
  if (pos < b) {
    if (absl::Status e = emit(pos, b); !e.ok()) return e;
  }
  if (first && stored) {
    // Wholly superseded: it goes.
    batch->Delete(key);
    pending->erase(key);
  }
  return absl::OkStatus();
}

void RecordStore::RestoreLocked(std::vector<Undo>& undo) {
  for (auto u = undo.rbegin(); u != undo.rend(); ++u) {
    Pieces& pieces = ranged_[u->group];
    if (u->had) {
      pieces[u->start] = u->old;
    } else {
      pieces.erase(u->start);
    }
    if (pieces.empty()) ranged_.erase(u->group);
  }
  undo.clear();
}

absl::Status RecordStore::Put(const std::vector<DelegateRuleRecord>& records) {
  for (const DelegateRuleRecord& r : records) {
    if (r.sswitch.empty() || r.sswitch.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat("bad sSwitch name in a delegate record: '", r.sswitch, "'"));
    }
  }
  MutexLock l(&write_mu_);
  rocksdb::WriteBatch batch;
  absl::flat_hash_map<std::string, std::string> pending;
  std::vector<Undo> undo;
  for (const DelegateRuleRecord& r : records) {
    absl::Status s = AddLocked(r, RecordKey(r.sswitch, r.seq), &batch, &pending,
                               &undo, false);
    if (!s.ok()) {
      RestoreLocked(undo);
      return s;
    }
  }
  absl::Status s = FromRocks(db_->Write(rocksdb::WriteOptions(), &batch),
                             "storing delegate records");
  if (!s.ok()) RestoreLocked(undo);
  return s;
}

absl::Status RecordStore::List(const std::string& sswitch, uint64_t after,
                               uint32_t limit, proto::RecordList* out) const {
  std::string prefix(1, kRecordPrefix);
  if (!sswitch.empty()) prefix = SSwitchPrefix(sswitch);
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
    if (limit > 0 && static_cast<uint32_t>(out->records_size()) >= limit &&
        r.seq() != out->records(out->records_size() - 1).seq()) {
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
  const std::string prefix = SSwitchPrefix(sswitch);
  MutexLock l(&write_mu_);
  rocksdb::WriteBatch batch;
  struct Unindex {
    std::string group;
    uint64_t start;
    std::string key;
  };
  std::vector<Unindex> unindex;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    if (key.size() < prefix.size() + kSeqBytes) continue;
    const uint64_t seq = ReadBigEndian(key.substr(prefix.size(), kSeqBytes));
    if (up_to != 0 && seq > up_to) break;
    proto::DelegateRecord r;
    const bool parsed = r.ParseFromArray(it->value().data(),
                                         static_cast<int>(it->value().size()));
    if (!anchor.empty() && parsed && r.anchor() != anchor) continue;
    batch.Delete(it->key());
    if (parsed) {
      if (std::optional<Rule> rule = RangedRule(r.rule())) {
        unindex.push_back(Unindex{GroupOf(r.sswitch(), r.anchor(), *rule),
                                  rule->pattern.file.range->start,
                                  it->key().ToString()});
      }
    }
  }
  if (absl::Status s = FromRocks(it->status(), "forgetting records"); !s.ok()) {
    return s;
  }
  if (absl::Status s = FromRocks(db_->Write(rocksdb::WriteOptions(), &batch),
                                 "forgetting records");
      !s.ok()) {
    return s;
  }
  for (const Unindex& u : unindex) {
    auto g = ranged_.find(u.group);
    if (g == ranged_.end()) continue;
    auto p = g->second.find(u.start);
    if (p != g->second.end() && p->second.key == u.key) g->second.erase(p);
    if (g->second.empty()) ranged_.erase(g);
  }
  return static_cast<uint64_t>(batch.Count());
}

uint64_t RecordStore::CountForTesting() const {
  uint64_t n = 0;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->NewIterator(rocksdb::ReadOptions()));
  const std::string prefix(1, kRecordPrefix);
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix);
       it->Next()) {
    ++n;
  }
  return n;
}

}  // namespace sroute

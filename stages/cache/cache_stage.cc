// SPDX-License-Identifier: Apache-2.0
#include "stages/cache/cache_stage.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "sswitch/sswitch.h"
#include "stages/cache/cache_impl.h"
#include "util/strings.h"

namespace sroute {
namespace cache_internal {
namespace {

constexpr uint64_t kAll = std::numeric_limits<uint64_t>::max();

absl::Status Bad(const std::string& what) {
  return absl::InvalidArgumentError(StrCat("cache: ", what));
}

bool WholeFileChange(Op op) {
  return op != Op::kWrite;  // the observer sees only byte-changing ops
}

}  // namespace

absl::StatusOr<Options> ParseOptions(const proto::CacheOptions& o) {
  Options out;
  if (o.block_size() != 0) {
    const uint64_t bs = o.block_size();
    if ((bs & (bs - 1)) != 0 || bs < 512 || bs > (1u << 20)) {
      return Bad(
          StrCat("block_size ", bs, " is not a power of two in 512..1048576"));
    }
    out.block_size = bs;
  }
  if (o.has_partition_bytes()) out.default_bytes = o.partition_bytes();
  uint64_t total = out.default_bytes;
  for (const auto& p : o.partition()) {
    if (p.name().empty()) return Bad("a partition needs a name");
    if (!out.named.emplace(p.name(), p.bytes()).second) {
      return Bad(StrCat("partition '", p.name(), "' is named twice"));
    }
    total += p.bytes();
  }
  if (o.partition_by().empty() || o.partition_by() == "tenant") {
    out.by = Options::By::kTenant;
  } else if (o.partition_by() == "rule") {
    out.by = Options::By::kRule;
  } else if (o.partition_by() == "none") {
    out.by = Options::By::kNone;
  } else {
    return Bad(StrCat("partition_by '", o.partition_by(),
                      "' is not tenant, rule or none"));
  }
  if (o.policy().empty() || o.policy() == "s3fifo") {
    out.policy = Policy::kS3Fifo;
  } else if (o.policy() == "lru") {
    out.policy = Policy::kLru;
  } else {
    return Bad(StrCat("policy '", o.policy(), "' is not s3fifo or lru"));
  }
  if (o.admission().empty() || o.admission() == "none") {
    out.admission = Admission::kAll;
  } else if (o.admission() == "frequency") {
    out.admission = Admission::kFrequency;
  } else {
    return Bad(
        StrCat("admission '", o.admission(), "' is not frequency or none"));
  }
  if (o.write_mode().empty() || o.write_mode() == "write_through") {
    out.write_back = false;
  } else if (o.write_mode() == "write_back") {
    out.write_back = true;
  } else {
    return Bad(StrCat("write_mode '", o.write_mode(),
                      "' is not write_through or write_back"));
  }
  out.dirty_limit = o.has_dirty_limit_bytes()
                        ? o.dirty_limit_bytes()
                        : std::max<uint64_t>(1 << 20, total / 4);
  if (out.write_back && out.dirty_limit < out.block_size) {
    return Bad(StrCat("dirty_limit_bytes ", out.dirty_limit,
                      " is below block_size ", out.block_size));
  }
  const uint32_t high =
      o.has_dirty_high_percent() ? o.dirty_high_percent() : 75;
  const uint32_t low = o.has_dirty_low_percent() ? o.dirty_low_percent() : 25;
  if (high > 100 || low > high) {
    return Bad(StrCat("dirty_low_percent ", low, " and dirty_high_percent ",
                      high, " need low <= high <= 100"));
  }
  out.dirty_high = out.dirty_limit * high / 100;
  out.dirty_low = out.dirty_limit * low / 100;
  out.max_flushes = o.has_max_flushes() ? o.max_flushes() : 16;
  if (out.max_flushes == 0 || out.max_flushes > 1024) {
    return Bad(StrCat("max_flushes ", out.max_flushes, " is not in 1..1024"));
  }
  if (o.tier_dir().empty() != (o.tier_bytes() == 0)) {
    return Bad("tier_dir and tier_bytes go together (a second tier)");
  }
  if (!o.tier_dir().empty() && o.tier_bytes() < out.block_size) {
    return Bad(StrCat("tier_bytes ", o.tier_bytes(), " is below block_size ",
                      out.block_size));
  }
  out.tier_dir = o.tier_dir();
  out.tier_bytes = o.tier_bytes();
  out.sequential_cutoff = o.sequential_cutoff_bytes();
  return out;
}

CacheStage::CacheStage(proto::StageConfig config, Options opts,
                       std::unique_ptr<Tier> tier, SSwitch* sswitch)
    : sswitch_(sswitch),
      config_(std::move(config)),
      opts_(std::move(opts)),
      tier_(std::move(tier)) {
  if (sswitch_ != nullptr) {
    observer_id_ = sswitch_->AddChangeObserver(
        [this](const Io& io, bool done) { OnChange(io, done); });
  }
  MutexLock l(&mu_);
  WantFlushes(opts_.write_back);
}

void CacheStage::WantFlushes(bool on) {
  if (sswitch_ == nullptr || on == wants_flushes_) return;
  wants_flushes_ = on;
  sswitch_->WantFlushes(on ? 1 : -1);
}

CacheStage::~CacheStage() {
  // After Stop() the sSwitch may be gone; before it, it is alive (it holds
  // the stage).
  bool stopped;
  {
    MutexLock l(&mu_);
    stopped = stopped_;
    if (!stopped) WantFlushes(false);
    // Not stopped (dirty blocks are lost): flushes in flight call back.
    while (flushes_in_flight_ > 0) flushed_.Wait(&mu_);
  }
  if (!stopped && sswitch_ != nullptr) {
    sswitch_->RemoveChangeObserver(observer_id_);
  }
  StopFlusher();
}

proto::StageConfig CacheStage::config() const {
  MutexLock l(&mu_);
  return config_;
}

void CacheStage::Submit(Io* io, const Forward& forward) {
  switch (io->header.op) {
    case Op::kRead:
      Read(io, forward);
      return;
    case Op::kWrite: {
      bool write_back;
      {
        MutexLock l(&mu_);
        write_back = opts_.write_back && !stopped_;
      }
      if (write_back) {
        WriteBack(io, forward);
        return;
      }
      break;
    }
    case Op::kFsync:
    case Op::kFlush:  // a close: write back what this file has dirty
      Fsync(io, forward);
      return;
    case Op::kOpen:
      ShowDirtySize(io);
      Open(io, forward);
      return;
    case Op::kSetattr:
      if (io->args.to_set & (kSetAtime | kSetMtime)) {
        // Times set while writes wait: they land first, so the backend's
        // write does not move the mtime past the one asked for.
        Fsync(io, forward);
        return;
      }
      ShowDirtySize(io);
      break;
    case Op::kGetattr:
    case Op::kLookup:
    case Op::kCreate:
      ShowDirtySize(io);
      break;
    case Op::kLseek:
      // Data and holes: the backend's answer is right once it has the
      // dirty blocks (an fsync's wait, without the backend's sync).
      Fsync(io, forward);
      return;
    default:
      break;
  }
  // Write-through writes and every other op go on; the observer drops
  // what they make stale.
  forward(io);
}

FileState* CacheStage::FindFile(const std::string& name) {
  auto it = files_.find(name);
  return it == files_.end() ? nullptr : it->second.get();
}

FileState* CacheStage::GetFile(const std::string& name) {
  auto& slot = files_[name];
  if (slot == nullptr) {
    slot = std::make_unique<FileState>();
    slot->name = name;
    if (!free_ids_.empty()) {
      slot->id = free_ids_.back();
      free_ids_.pop_back();
      file_by_id_[slot->id] = slot.get();
    } else {
      slot->id = static_cast<uint32_t>(file_by_id_.size());
      file_by_id_.push_back(slot.get());
    }
  }
  return slot.get();
}

bool CacheStage::Idle(const FileState& fs) const {
  return fs.users == 0 && fs.cached == 0 && fs.dirty.empty() &&
         fs.flushing == 0 && fs.urgent == 0 && fs.pending.empty() &&
         fs.fsync_waiters.empty() && fs.error.ok() &&
         (tier_ == nullptr || !tier_->HoldsFile(fs.id));
}

void CacheStage::MaybeSweep() {
  if (files_.size() < sweep_at_) return;
  for (auto it = files_.begin(); it != files_.end();) {
    FileState& fs = *it->second;
    if (!Idle(fs)) {
      ++it;
      continue;
    }
    file_by_id_[fs.id] = nullptr;
    free_ids_.push_back(fs.id);
    ++files_reclaimed_;
    files_.erase(it++);
  }
  sweep_at_ = std::max(kMinSweep, 2 * files_.size());
}

Part* CacheStage::GetPart(const Io& io) {
  std::string name;
  switch (opts_.by) {
    case Options::By::kTenant:
      name = io.header.source;
      break;
    case Options::By::kRule:
      name = std::to_string(io.rule_id());
      break;
    case Options::By::kNone:
      name = "all";
      break;
  }
  auto& slot = parts_[name];
  if (slot == nullptr) {
    slot = std::make_unique<Part>();
    slot->name = name;
    ApplyBudgets(/*reset=*/false);
  }
  return slot.get();
}

void CacheStage::ApplyBudgets(bool reset) {
  for (auto& [name, part] : parts_) {
    const uint64_t blocks = opts_.BudgetOf(name) / opts_.block_size;
    if (part->blocks == nullptr || reset) {
      if (part->blocks != nullptr) {
        part->evictions_before += part->blocks->evictions();
      }
      part->blocks = std::make_unique<Partition>(
          opts_.policy, blocks, opts_.block_size, opts_.admission);
      part->bytes = 0;
      part->dirty_bytes = 0;
      Part* p = part.get();
      // Evictions run inside Partition::Insert, under mu_; evicted
      // blocks are clean, and go to the second tier.
      part->blocks->set_on_evict(
          [this, p](Block* b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            p->bytes -= b->len;
            --file_by_id_[b->file]->cached;
            if (tier_ != nullptr) {
              tier_->Put(b->file, b->index, b->data(), b->len);
            }
          });
    } else {
      part->blocks->SetCapacity(blocks);
    }
  }
}

Block* CacheStage::InsertBlock(Part* part, FileState* fs, uint64_t index) {
  Block* b = part->blocks->Insert(fs->id, index);
  if (b == nullptr) return nullptr;
  ++fs->cached;
  fs->max_block = std::max(fs->max_block, index + 1);
  return b;
}

void CacheStage::SetLen(Part* part, Block* b, uint32_t len) {
  part->bytes += len;
  part->bytes -= b->len;
  if (b->dirty) {
    part->dirty_bytes += len;
    part->dirty_bytes -= b->len;
    dirty_total_ += len;
    dirty_total_ -= b->len;
    dirty_peak_ = std::max(dirty_peak_, dirty_total_);
  }
  b->len = len;
  if (len < opts_.block_size)
    file_by_id_[b->file]->short_blocks.insert(b->index);
}

void CacheStage::MarkDirty(Part* part, FileState* fs, Block* b) {
  if (b->dirty) return;
  b->dirty = 1;
  part->dirty_bytes += b->len;
  dirty_total_ += b->len;
  dirty_peak_ = std::max(dirty_peak_, dirty_total_);
  fs->dirty.emplace(b, part);
  dirty_files_.insert(fs);
  dirty_file_count_.store(dirty_files_.size(), std::memory_order_release);
}

void CacheStage::EraseBlock(Part* part, Block* b) {
  FileState* fs = file_by_id_[b->file];
  part->bytes -= b->len;
  if (b->dirty) {
    part->dirty_bytes -= b->len;
    dirty_total_ -= b->len;
    fs->dirty.erase(b);
    if (fs->dirty.empty()) {
      dirty_files_.erase(fs);
      dirty_file_count_.store(dirty_files_.size(), std::memory_order_release);
    }
  }
  --fs->cached;
  part->blocks->Erase(b);
}

Block* CacheStage::DirtyBlock(FileState* fs, uint64_t index, Part** part) {
  if (fs->dirty.empty()) return nullptr;
  for (auto& [name, p] : parts_) {
    Block* b = p->blocks->Find(fs->id, index);
    if (b != nullptr && b->dirty) {
      if (part != nullptr) *part = p.get();
      return b;
    }
  }
  return nullptr;
}

void CacheStage::DropClean(FileState* fs, uint64_t lo, uint64_t hi,
                           const Part* except) {
  if (lo >= hi) return;
  const uint64_t bs = opts_.block_size;
  const uint64_t first = lo / bs;
  uint64_t last = hi == kAll ? kAll : (hi - 1) / bs;
  if (tier_ != nullptr) tier_->Drop(fs->id, first, last);
  if (fs->cached == 0) return;
  if (fs->max_block == 0 || first >= fs->max_block) return;
  last = std::min(last, fs->max_block - 1);
  uint64_t total = 0;
  for (auto& [name, p] : parts_) total += p->blocks->size();
  std::vector<std::pair<Part*, Block*>> drop;
  if ((last - first + 1) * parts_.size() <= total) {
    // Few blocks to look at: look each up.
    for (uint64_t i = first; i <= last; ++i) {
      for (auto& [name, p] : parts_) {
        if (p.get() == except) continue;
        if (Block* b = p->blocks->Find(fs->id, i))
          drop.emplace_back(p.get(), b);
      }
    }
  } else {
    // A wide range (a whole file): one pass over the cached blocks.
    for (auto& entry : parts_) {
      Part* part = entry.second.get();
      if (part == except) continue;
      part->blocks->ForEach([&](Block* b) {
        if (b->file == fs->id && b->index >= first && b->index <= last) {
          drop.emplace_back(part, b);
        }
      });
    }
  }
  for (auto [p, b] : drop) {
    if (b->dirty || b->flushing) continue;
    EraseBlock(p, b);
  }
  if (hi == kAll && fs->cached == 0) fs->max_block = 0;
}

void CacheStage::FixShort(FileState* fs, uint64_t end) {
  const uint64_t bs = opts_.block_size;
  while (!fs->short_blocks.empty()) {
    const uint64_t k = *fs->short_blocks.begin();
    if (end <= (k + 1) * bs) return;  // the write ends in or before it
    fs->short_blocks.erase(fs->short_blocks.begin());
    if (tier_ != nullptr) tier_->Drop(fs->id, k, k);
    for (auto& [name, p] : parts_) {
      Block* b = p->blocks->Find(fs->id, k);
      if (b == nullptr || b->len == bs) continue;
      if (b->dirty || b->flushing) {
        // A write went past its end: the rest of the block is a hole.
        std::memset(b->data() + b->len, 0, bs - b->len);
        SetLen(p.get(), b, static_cast<uint32_t>(bs));
      } else {
        EraseBlock(p.get(), b);
      }
    }
  }
}

bool CacheStage::Cached(const FileState& fs, uint64_t index) const {
  for (const auto& [name, p] : parts_) {
    if (p->blocks->Find(fs.id, index) != nullptr) return true;
  }
  return tier_ != nullptr && tier_->Contains(fs.id, index);
}

bool CacheStage::EndsFile(FileState* fs, uint64_t index) {
  auto it = fs->short_blocks.upper_bound(index);
  while (it != fs->short_blocks.end()) {
    if (Cached(*fs, *it)) return false;
    it = fs->short_blocks.erase(it);
  }
  return true;
}

void CacheStage::PruneShort(FileState* fs) {
  std::erase_if(fs->short_blocks,
                [&](uint64_t k)
                    ABSL_NO_THREAD_SAFETY_ANALYSIS { return !Cached(*fs, k); });
}

void CacheStage::Read(Io* io, const Forward& forward) {
  const uint64_t off = io->header.offset;
  const uint64_t len = io->header.length;
  const uint64_t end = off + len;
  ReleasableMutexLock l(&mu_);
  if (len == 0 || io->read_buffer.size() < len || stopped_) {
    l.Unlock();
    forward(io);
    return;
  }
  MaybeSweep();
  FileState* fs = GetFile(io->header.file);
  Part* part = GetPart(*io);
  const uint64_t bs = opts_.block_size;
  const uint64_t first = off / bs;
  const uint64_t last = (end - 1) / bs;

  if (off == fs->seq_end && fs->seq_run > 0) {
    fs->seq_run += len;
  } else {
    fs->seq_run = len;
  }
  fs->seq_end = end;
  const bool bypass =
      opts_.sequential_cutoff > 0 && fs->seq_run > opts_.sequential_cutoff;

  if (tier_ != nullptr && !bypass) Promote(part, fs, first, last);
  size_t present = 0;
  bool hit = !bypass;
  uint64_t data_end = end;  // where the file ends, if before `end`
  uint64_t hit_last = last;
  if (!bypass) {
    for (uint64_t i = first; i <= last; ++i) {
      Block* b = part->blocks->Find(fs->id, i);
      if (b == nullptr) {
        hit = false;
        continue;
      }
      ++present;
      const uint64_t bstart = i * bs;
      if (hit && b->len < bs && bstart + b->len < end) {
        // The file ended here at the fill, unless dirty bytes lie beyond,
        // or a later write or fill made another block the short one (this
        // one's end is stale: go to the backend, the fill mends it).
        if (fs->dirty_size > bstart + b->len || !EndsFile(fs, i)) {
          hit = false;
          continue;
        }
        data_end = std::max(off, bstart + b->len);
        hit_last = i;
        break;
      }
    }
  }
  if (hit) {
    for (uint64_t i = first; i <= hit_last; ++i) {
      Block* b = part->blocks->Lookup(fs->id, i);
      const uint64_t bstart = i * bs;
      const uint64_t s = std::max(off, bstart);
      const uint64_t e = std::min(data_end, bstart + b->len);
      if (s < e) {
        std::memcpy(io->read_buffer.data() + (s - off),
                    b->data() + (s - bstart), e - s);
      }
    }
    io->bytes = data_end - off;
    ++part->hits;
    l.Unlock();
    io->Complete();
    return;
  }
  if (bypass) {
    ++bypassed_;
  } else if (present == 0) {
    ++part->misses;
  } else {
    ++part->partial_hits;
  }
  // Dirty bytes (write-back) newer than the backend's: copied now, laid
  // over the response (a flush may land before it and clean them).
  struct Overlay {
    uint64_t offset;
    std::string bytes;
  };
  std::vector<Overlay> overlay;
  uint64_t dirty_size = 0;
  if (!fs->dirty.empty()) {
    dirty_size = fs->dirty_size;
    for (uint64_t i = first; i <= last; ++i) {
      Block* b = DirtyBlock(fs, i);
      if (b == nullptr) continue;
      const uint64_t bstart = i * bs;
      const uint64_t s = std::max(off, bstart);
      const uint64_t e = std::min(end, bstart + b->len);
      if (s < e) {
        overlay.push_back(
            Overlay{s, std::string(b->data() + (s - bstart), e - s)});
      }
    }
  }
  const uint64_t gen = fs->gen;
  ++fs->users;  // until the hook has run
  io->AddResponseHook([this, fs, part, gen, bypass, off, len,
                       overlay = std::move(overlay), dirty_size](Io& done) {
    uint64_t got = std::min<uint64_t>(done.bytes, len);
    const bool short_read = got < len;
    bool fill = false;
    if (done.status.ok()) {
      const uint64_t end = off + len;
      char* buf = done.read_buffer.data();
      for (const Overlay& o : overlay) {
        if (off + got < o.offset) {
          std::memset(buf + got, 0, o.offset - off - got);
        }
        std::memcpy(buf + (o.offset - off), o.bytes.data(), o.bytes.size());
        got = std::max(got, o.offset + o.bytes.size() - off);
      }
      if (dirty_size > off + got) {
        const uint64_t e = std::min(end, dirty_size);
        std::memset(buf + got, 0, e - off - got);
        got = e - off;
      }
      done.bytes = got;
      fill = !bypass && overlay.empty() && dirty_size == 0;
    }
    MutexLock l(&mu_);
    --fs->users;
    if (!fill || stopped_) return;
    const char* buf = done.read_buffer.data();
    if (fs->gen != gen) {
      ++fills_dropped_;
      return;
    }
    const uint64_t bs = opts_.block_size;
    for (uint64_t i = off / bs; i * bs < off + got; ++i) {
      const uint64_t bstart = i * bs;
      if (bstart < off) continue;  // the read began inside it
      const uint64_t avail = std::min(bs, off + got - bstart);
      // A block is whole, or ends where a short read says the file ends.
      if (avail < bs && !short_read) break;
      if (Block* have = part->blocks->Find(fs->id, i); have != nullptr) {
        // A clean block that ended short holds fewer bytes than the
        // backend now has: it takes them (same generation, so no change
        // came in between).
        if (!have->dirty && !have->flushing && have->len < avail) {
          std::memcpy(have->data(), buf + (bstart - off), avail);
          SetLen(part, have, static_cast<uint32_t>(avail));
        }
        continue;
      }
      Block* b = InsertBlock(part, fs, i);
      if (b == nullptr) break;
      std::memcpy(b->data(), buf + (bstart - off), avail);
      SetLen(part, b, static_cast<uint32_t>(avail));
    }
  });
  l.Unlock();
  forward(io);
}

void CacheStage::Promote(Part* part, FileState* fs, uint64_t first,
                         uint64_t last) {
  for (uint64_t i = first; i <= last; ++i) {
    if (!tier_->Contains(fs->id, i) || part->blocks->Find(fs->id, i)) continue;
    // (Making room may evict blocks of this read: they go to the tier.)
    Block* b = InsertBlock(part, fs, i);
    if (b == nullptr) return;
    const int64_t len = tier_->Take(fs->id, i, b->data());
    if (len <= 0) {
      EraseBlock(part, b);
      continue;
    }
    SetLen(part, b, static_cast<uint32_t>(len));
    ++tier_hits_;
  }
}

// Write-back: a file's size is the backend's or the end of its furthest
// dirty byte, whichever is larger (stat after a write sees the write), and
// its mtime and ctime are the last write's if later than the backend's.
// Both are taken at the request too: a flush that lands after the backend
// answered empties the dirty set (and zeroes dirty_size) before the reply.
void CacheStage::ShowDirtySize(Io* io) {
  // Nothing dirty (always so in write-through): nothing to show, no lock.
  // A write acknowledged before this request made its file dirty before
  // its ack (release/acquire on the count).
  if (dirty_file_count_.load(std::memory_order_acquire) == 0) return;
  uint64_t at_request = 0;
  struct timespec written_at = {0, 0};
  {
    MutexLock l(&mu_);
    if (const FileState* fs = FindFile(io->header.file)) {
      at_request = fs->dirty_size;
      if (at_request != 0) written_at = fs->dirty_mtime;
    }
  }
  io->AddResponseHook([this, at_request, written_at](Io& done) {
    if (!done.status.ok() || !S_ISREG(done.attr.st_mode)) return;
    MutexLock l(&mu_);
    const FileState* fs = FindFile(done.header.file);
    const uint64_t dirty_end =
        std::max(at_request, fs != nullptr ? fs->dirty_size : 0);
    if (dirty_end > static_cast<uint64_t>(done.attr.st_size)) {
      done.attr.st_size = static_cast<off_t>(dirty_end);
    }
    struct timespec t = written_at;
    if (fs != nullptr && fs->dirty_size != 0) t = fs->dirty_mtime;
    auto later = [](const timespec& a, const timespec& b) {
      return a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec;
    };
    if (later(t, done.attr.st_mtim)) done.attr.st_mtim = t;
    if (later(t, done.attr.st_ctim)) done.attr.st_ctim = t;
  });
}

void CacheStage::Open(Io* io, const Forward& forward) {
  io->AddResponseHook([this](Io& done) {
    if (!done.status.ok() || !S_ISREG(done.attr.st_mode)) return;
    const uint64_t attr[5] = {
        static_cast<uint64_t>(done.attr.st_ino),
        static_cast<uint64_t>(done.attr.st_size),
        static_cast<uint64_t>(done.attr.st_mtim.tv_sec) * 1'000'000'000 +
            static_cast<uint64_t>(done.attr.st_mtim.tv_nsec),
        static_cast<uint64_t>(done.attr.st_ctim.tv_sec) * 1'000'000'000 +
            static_cast<uint64_t>(done.attr.st_ctim.tv_nsec),
        done.change_stamp};
    MutexLock l(&mu_);
    MaybeSweep();
    FileState* fs = GetFile(done.header.file);
    if (!std::equal(attr, attr + 5, fs->open_attr)) {
      // Changed since the last open: by another host, or by writes here
      // (which dropped what they changed already; dropping again is safe).
      if (fs->open_attr[0] != 0) {
        ++fs->gen;
        DropClean(fs, 0, kAll);
        PruneShort(fs);
        ++open_drops_;
      }
      std::copy(attr, attr + 5, fs->open_attr);
    }
  });
  forward(io);
}

void CacheStage::OnChange(const Io& io, bool done) {
  MutexLock l(&mu_);
  if (flush_ios_.contains(&io)) return;  // our own write-back
  const Op op = io.header.op;
  // Which writes the sSwitch announced: only those can be ours at
  // done=true (an address seen once may come back as another IO).
  if (op == Op::kWrite && !done && opts_.write_back) observed_.insert(&io);
  if (op == Op::kWrite && done) observed_.erase(&io);
  if (done && own_.erase(&io) > 0) return;
  FileState* files[2] = {FindFile(io.header.file), nullptr};
  if (op == Op::kRenameFrom || op == Op::kRenameTo) {
    if (!done) {
      // Kept even if unknown now: a read of it may start before done=true.
      FileState* other = GetFile(io.args.second_file);
      if (FileState*& held = renames_[&io]; held != other) {
        if (held != nullptr) --held->users;
        held = other;
        ++other->users;
      }
      files[1] = other;
    } else if (auto it = renames_.find(&io); it != renames_.end()) {
      files[1] = it->second;
      --files[1]->users;
      renames_.erase(it);
    }
  }
  for (FileState* fs : files) {
    if (fs == nullptr) continue;
    ++fs->gen;
    if (WholeFileChange(op)) {
      if (!done && opts_.write_back && (!fs->dirty.empty() || fs->flushing)) {
        HoldForChange(io, fs, 0, kAll, /*whole_file=*/true);
      }
      DropClean(fs, 0, kAll);
      PruneShort(fs);
      continue;
    }
    const uint64_t lo = io.header.offset;
    const uint64_t hi = lo + io.header.length;
    if (!done) {
      if (opts_.write_back && (!fs->dirty.empty() || fs->flushing)) {
        HoldForChange(io, fs, lo, hi, /*whole_file=*/false);
      }
      continue;
    }
    // Done (through this cache write-through, or past it): the backend
    // has new bytes.
    if (opts_.write_back) ReleaseChange(io, fs);
    DropClean(fs, lo, hi);
    FixShort(fs, hi);
  }
}

void CacheStage::Report(proto::StageStats* out) const {
  auto& c = *out->mutable_counters();
  MutexLock l(&mu_);
  int64_t hits = 0, misses = 0, partial = 0, evictions = 0, bytes = 0;
  for (const auto& [name, p] : parts_) {
    const int64_t ev =
        static_cast<int64_t>(p->blocks->evictions() + p->evictions_before);
    c[name + ".hits"] = static_cast<int64_t>(p->hits);
    c[name + ".misses"] = static_cast<int64_t>(p->misses);
    c[name + ".partial_hits"] = static_cast<int64_t>(p->partial_hits);
    c[name + ".evictions"] = ev;
    c[name + ".bytes"] = static_cast<int64_t>(p->bytes);
    c[name + ".dirty_bytes"] = static_cast<int64_t>(p->dirty_bytes);
    c[name + ".budget_bytes"] = static_cast<int64_t>(opts_.BudgetOf(name));
    hits += p->hits;
    misses += p->misses;
    partial += p->partial_hits;
    evictions += ev;
    bytes += p->bytes;
  }
  c["hits"] = hits;
  c["misses"] = misses;
  c["partial_hits"] = partial;
  c["evictions"] = evictions + static_cast<int64_t>(evictions_gone_);
  c["bytes"] = bytes;
  c["dirty_bytes"] = static_cast<int64_t>(dirty_total_);
  c["dirty_peak_bytes"] = static_cast<int64_t>(dirty_peak_);
  c["bypassed"] = static_cast<int64_t>(bypassed_);
  c["open_drops"] = static_cast<int64_t>(open_drops_);
  c["files"] = static_cast<int64_t>(files_.size());
  c["files_reclaimed"] = static_cast<int64_t>(files_reclaimed_);
  if (tier_ != nullptr) {
    c["tier_hits"] = static_cast<int64_t>(tier_hits_);
    c["tier_bytes"] = static_cast<int64_t>(tier_->used_bytes());
    c["tier_evictions"] = static_cast<int64_t>(tier_->evictions());
  }
  c["fills_dropped"] = static_cast<int64_t>(fills_dropped_);
  c["flushes"] = static_cast<int64_t>(flushes_);
  c["flush_errors"] = static_cast<int64_t>(flush_errors_);
  c["writes_waited"] = static_cast<int64_t>(writes_waited_);
  c["read_fills"] = static_cast<int64_t>(read_fills_);
}

absl::Status CacheStage::Reconfigure(const proto::StageConfig& next) {
  auto opts = ParseOptions(next.cache());
  if (!opts.ok()) return opts.status();
  MutexLock l(&mu_);
  if (opts->write_back && sswitch_ == nullptr) {
    return Bad("write_mode write_back needs the host's sSwitch");
  }
  // A new block size, partitioning or policy starts from empty partitions
  // (simpler than re-cutting blocks); leaving write-back, or starting
  // over, writes the dirty blocks back first.
  const bool reset = opts->block_size != opts_.block_size ||
                     opts->by != opts_.by || opts->policy != opts_.policy;
  // A new second tier (or none) starts empty.
  const bool new_tier = opts->tier_dir != opts_.tier_dir ||
                        opts->tier_bytes != opts_.tier_bytes ||
                        opts->block_size != opts_.block_size;
  std::unique_ptr<Tier> tier;
  if (new_tier && !opts->tier_dir.empty()) {
    auto t = Tier::Open(opts->tier_dir, next.name(), opts->tier_bytes,
                        opts->block_size);
    if (!t.ok()) return t.status();
    tier = *std::move(t);
  }
  if (dirty_total_ > 0 && (reset || !opts->write_back)) {
    absl::Status s = FlushAllAndWait();
    if (!s.ok()) return s;
  }
  if (new_tier) {
    tier_.reset();  // its file first: the new one may have its name
    tier_ = std::move(tier);
  } else if (reset && tier_ != nullptr) {
    tier_->Clear();
  }
  opts_ = *std::move(opts);
  config_ = next;
  WantFlushes(opts_.write_back);
  if (reset) {
    for (auto& [name, fs] : files_) {
      ++fs->gen;
      fs->cached = 0;
      fs->max_block = 0;
      fs->short_blocks.clear();
    }
  }
  ApplyBudgets(reset);
  return absl::OkStatus();
}

absl::Status CacheStage::Stop() {
  absl::Status s;
  {
    MutexLock l(&mu_);
    if (dirty_total_ > 0 || flushes_in_flight_ > 0) s = FlushAllAndWait();
    stopped_ = true;
    WantFlushes(false);
  }
  StopFlusher();
  if (sswitch_ != nullptr) sswitch_->RemoveChangeObserver(observer_id_);
  MutexLock l(&mu_);
  for (auto& [name, p] : parts_) {
    evictions_gone_ += p->blocks->evictions() + p->evictions_before;
    p->blocks = std::make_unique<Partition>(opts_.policy, 0, opts_.block_size,
                                            opts_.admission);
    p->evictions_before = 0;
    p->bytes = 0;
  }
  tier_.reset();
  return s;
}

}  // namespace cache_internal

void RegisterCacheStage(StageRegistry& registry) {
  (void)registry.Register(
      "cache",
      [](const proto::StageConfig& config,
         const StageEnv& env) -> absl::StatusOr<std::shared_ptr<HostStage>> {
        auto opts = cache_internal::ParseOptions(config.cache());
        if (!opts.ok()) return opts.status();
        if (opts->write_back && env.sswitch == nullptr) {
          return absl::InvalidArgumentError(
              "cache: write_mode write_back needs the host's sSwitch");
        }
        std::unique_ptr<Tier> tier;
        if (!opts->tier_dir.empty()) {
          auto t = Tier::Open(opts->tier_dir, config.name(), opts->tier_bytes,
                              opts->block_size);
          if (!t.ok()) return t.status();
          tier = *std::move(t);
        }
        return std::make_shared<cache_internal::CacheStage>(
            config, *std::move(opts), std::move(tier), env.sswitch);
      });
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// Write-back: dirty blocks, the flusher, fsync (CacheStage, cache_impl.h).
//
// A write completes in the cache when every block it touches is in the
// writer's partition or written whole. The (at most two) edge blocks it
// covers in part are read first when not cached (a read IO behind the
// stage; the writer's thread waits for it), rather than keeping dirty
// byte ranges per block, which would make every read of such a block
// merge backend and cache bytes. If that read raced with a change to the
// file, or a block is dirty in another partition, or no room is left,
// the write goes on to the backend like a write-through one, ordered
// against the dirty blocks it overlaps like an external write (below).
// Dirty blocks are never evicted.
//
// Ordering against changes that do not come through the cache (or fall
// back): the observer sees each before it reaches the backend (done=false).
// For a write it waits for flushes in flight of the blocks it overlaps and
// holds those blocks (no flush of them starts) until its done=true, which
// lays its bytes over the dirty blocks it overlaps: the flush that follows
// then writes old-dirty-plus-new bytes, so a flush never lands after the
// write with older bytes. Truncate, unlink, rename and the like first
// flush all of the file's dirty blocks and wait. The observer cannot tell
// at done=false that a write will come to this cache, so a write of ours
// to a block being flushed waits for that flush too.
//
// A failed flush drops the block (as the kernel does with a page whose
// writeback failed) and leaves the error with the file: the next write or
// fsync of that file through the cache fails with it, once.
#include <algorithm>
#include <cstring>
#include <limits>

#include "sswitch/sswitch.h"
#include "stages/cache/cache_impl.h"

namespace sroute {
namespace cache_internal {

struct CacheStage::Flush {
  Io io;
  std::string data;
  FileState* fs = nullptr;
  Part* part = nullptr;
  Block* block = nullptr;
  uint64_t seq = 0;  // flush_seq_ at its issue
};

CacheStage::WriteSpan CacheStage::SpanOf(const Io& io) const {
  const uint64_t bs = opts_.block_size;
  const uint64_t off = io.header.offset;
  const uint64_t end = off + io.header.length;
  return {bs, off, end, off / bs, (end - 1) / bs};
}

// A write the cache takes: its blocks' missing edges read in, room for
// its new dirty bytes waited for, its blocks pinned dirty and its bytes
// copied in; otherwise (too large, old bytes unknown, dirty in another
// partition, no room) it goes on to the backend, held against flushes.
void CacheStage::WriteBack(Io* io, const Forward& forward) {
  const uint64_t off = io->header.offset;
  const uint64_t len = io->header.length;
  const uint64_t end = off + len;
  ReleasableMutexLock l(&mu_);
  MaybeSweep();
  FileState* fs = GetFile(io->header.file);
  // Ours: the observer's hold (done=false) is not needed.
  std::erase_if(fs->pending, [io](const Pending& p) { return p.io == io; });
  if (!fs->error.ok()) {
    absl::Status s = std::move(fs->error);
    fs->error = absl::OkStatus();
    l.Unlock();
    io->Complete(std::move(s));
    return;
  }
  auto go_on = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (!fs->dirty.empty() || fs->flushing != 0) {
      HoldForChange(*io, fs, off, end, /*whole_file=*/false);
    }
    l.Unlock();
    forward(io);
  };
  if (len == 0 || io->write_data.size() < len) return go_on();
  Part* part = GetPart(*io);
  const uint64_t bs = opts_.block_size;
  const uint64_t first = off / bs;
  const uint64_t last = (end - 1) / bs;
  if ((last - first + 1) * 2 > part->blocks->capacity()) return go_on();

  FillEdges(*io, fs, part);
  if (!WaitForDirtyRoom(*io, fs, part)) return go_on();
  std::vector<Block*> blocks;
  if (!PinDirty(fs, part, first, last, &blocks)) return go_on();
  // Other partitions' clean copies are stale now; so is an end of file
  // this write passes.
  DropClean(fs, off, end, part);
  FixShort(fs, end);
  CopyIn(*io, fs, part, blocks);
  if (dirty_total_ >= opts_.dirty_high) {
    background_ = true;
    StartFlusher();
    work_.Signal();
  }
  io->bytes = len;
  l.Unlock();
  io->Complete();
}

// The edge blocks the write covers in part need their other bytes: read
// them first (behind the stage, like flushes), unless a change to the file
// raced with the read. Unlocks mu_ while each read runs.
void CacheStage::FillEdges(const Io& io, FileState* fs, Part* part) {
  const auto [bs, off, end, first, last] = SpanOf(io);
  const std::vector<uint64_t> edges = first == last
                                          ? std::vector<uint64_t>{first}
                                          : std::vector<uint64_t>{first, last};
  for (uint64_t i : edges) {
    const uint64_t bstart = i * bs;
    if ((off <= bstart && end >= bstart + bs) ||
        part->blocks->Find(fs->id, i) != nullptr ||
        DirtyBlock(fs, i) != nullptr) {
      continue;
    }
    const uint64_t gen = fs->gen;
    std::string buf(bs, '\0');
    Io child;
    child.header = io.header;
    child.header.stage = config_.name();
    child.header.op = Op::kRead;
    child.header.offset = bstart;
    child.header.length = bs;
    child.read_buffer = std::span<char>(buf.data(), buf.size());
    bool read = false;
    child.set_completion([this, &read](Io&) {
      MutexLock cl(&mu_);
      read = true;
      flushed_.SignalAll();
    });
    ++fs->users;
    mu_.Unlock();
    sswitch_->Route(&child);
    mu_.Lock();
    while (!read) flushed_.Wait(&mu_);
    --fs->users;
    if (!child.status.ok() || fs->gen != gen || stopped_ ||
        part->blocks->Find(fs->id, i) != nullptr) {
      continue;  // the plan sends the write on if still missing
    }
    Block* b = InsertBlock(part, fs, i);
    if (b == nullptr) continue;
    const uint64_t got = std::min<uint64_t>(child.bytes, bs);
    std::memcpy(b->data(), buf.data(), got);
    // A short read ends the backend's bytes, not the file's when dirty
    // bytes lie further on: up to them it is a hole (the block is zeros).
    uint64_t len = got;
    if (fs->dirty_size > i * bs + len) {
      len = std::min<uint64_t>(bs, fs->dirty_size - i * bs);
    }
    SetLen(part, b, static_cast<uint32_t>(len));
    ++read_fills_;
  }
}

// Plans the write, waiting while its new dirty bytes would pass the limit.
// False if the cache cannot take it (its old bytes unknown, dirty in
// another partition, more than the limit, the stage stopping).
bool CacheStage::WaitForDirtyRoom(const Io& io, FileState* fs, Part* part) {
  const auto [bs, off, end, first, last] = SpanOf(io);
  bool waited = false;
  for (;;) {
    uint64_t grow = 0;  // new dirty bytes
    for (uint64_t i = first; i <= last; ++i) {
      const uint64_t bstart = i * bs;
      const bool whole = off <= bstart && end >= bstart + bs;
      Block* mine = part->blocks->Find(fs->id, i);
      Part* where = nullptr;
      if (DirtyBlock(fs, i, &where) != nullptr && where != part) {
        return false;  // dirty in another partition
      }
      if (mine == nullptr && !whole) return false;  // old bytes unknown
      uint64_t new_len = std::max<uint64_t>(mine != nullptr ? mine->len : 0,
                                            std::min(bs, end - bstart));
      if (fs->dirty_size > bstart + new_len) {  // as CopyIn does
        new_len = std::min<uint64_t>(bs, fs->dirty_size - bstart);
      }
      grow += new_len - (mine != nullptr && mine->dirty ? mine->len : 0);
    }
    if (grow > opts_.dirty_limit) return false;
    if (dirty_total_ + grow <= opts_.dirty_limit) return true;
    if (!waited) ++writes_waited_;
    waited = true;
    background_ = true;
    StartFlusher();
    work_.Signal();
    ++writers_waiting_;
    ++fs->users;
    flushed_.Wait(&mu_);
    --fs->users;
    --writers_waiting_;
    if (stopped_) return false;
  }
}

// Pins blocks [first, last] of part dirty, those there and new ones (dirty
// blocks are never evicted, so adding one cannot evict another of this
// write). False if there is no room (the partition is all dirty): the new
// blocks are undone; the pinned ones stay dirty with their bytes (a
// harmless extra flush).
bool CacheStage::PinDirty(FileState* fs, Part* part, uint64_t first,
                          uint64_t last, std::vector<Block*>* blocks) {
  std::vector<bool> added;
  for (uint64_t i = first; i <= last; ++i) {
    Block* b = part->blocks->Lookup(fs->id, i);
    if (b != nullptr) MarkDirty(part, fs, b);
    blocks->push_back(b);
    added.push_back(false);
  }
  for (uint64_t i = first; i <= last; ++i) {
    if ((*blocks)[i - first] != nullptr) continue;
    Block* b = InsertBlock(part, fs, i);
    if (b == nullptr) {
      for (uint64_t j = first; j < i; ++j) {
        if (added[j - first]) EraseBlock(part, (*blocks)[j - first]);
      }
      return false;
    }
    MarkDirty(part, fs, b);
    (*blocks)[i - first] = b;
    added[i - first] = true;
  }
  return true;
}

// Copies the write's bytes into its pinned blocks and records the file's
// new dirty end, time and writer.
void CacheStage::CopyIn(const Io& io, FileState* fs, Part* part,
                        const std::vector<Block*>& blocks) {
  const auto [bs, off, end, first, last] = SpanOf(io);
  for (size_t k = 0; k < blocks.size(); ++k) {
    Block* b = blocks[k];
    const uint64_t bstart = (first + k) * bs;
    const uint64_t s = std::max(off, bstart);
    const uint64_t e = std::min(end, bstart + bs);
    if (b->len < s - bstart) {
      // The block ended (the file did, when it was read) before this
      // write: what lies between is a hole, zeros, not the bytes the
      // block's memory held before.
      std::memset(b->data() + b->len, 0, (s - bstart) - b->len);
    }
    std::memcpy(b->data() + (s - bstart), io.write_data.data() + (s - off),
                e - s);
    MarkDirty(part, fs, b);
    // The block ends where the write does only if nothing lies further
    // on: dirty bytes past it (fs->dirty_size is still the old end) make
    // the rest of the block a hole inside the file, not its end.
    const uint64_t written = std::max<uint64_t>(b->len, e - bstart);
    uint64_t new_len = written;
    if (fs->dirty_size > bstart + new_len) {
      new_len = std::min<uint64_t>(bs, fs->dirty_size - bstart);
      std::memset(b->data() + written, 0, new_len - written);
    }
    SetLen(part, b, static_cast<uint32_t>(new_len));
    if (b->flushing) b->redirty = 1;
  }
  ++fs->gen;  // fills in flight read the backend's older bytes
  fs->dirty_size = std::max(fs->dirty_size, end);
  clock_gettime(CLOCK_REALTIME, &fs->dirty_mtime);
  fs->writer = io.header.source;
  // Its done=true (if the sSwitch announced it) must not undo it.
  if (observed_.contains(&io)) own_.insert(&io);
}

void CacheStage::Fsync(Io* io, const Forward& forward) {
  ReleasableMutexLock l(&mu_);
  FileState* fs = FindFile(io->header.file);
  if (fs == nullptr) {
    l.Unlock();
    forward(io);
    return;
  }
  // A failed flush is reported by the next fsync or close, not by an op
  // that only waits for the dirty blocks (lseek, setattr of times).
  const bool reports =
      io->header.op == Op::kFsync || io->header.op == Op::kFlush;
  if (reports && !fs->error.ok()) {
    absl::Status s = std::move(fs->error);
    fs->error = absl::OkStatus();
    l.Unlock();
    io->Complete(std::move(s));
    return;
  }
  if (fs->dirty.empty() && fs->flushing == 0) {
    l.Unlock();
    forward(io);  // the backend syncs what it holds
    return;
  }
  FsyncWaiter w{io, &forward, flush_seq_, {}};
  for (auto& [b, p] : fs->dirty) w.blocks.insert(b);
  fs->fsync_waiters.push_back(std::move(w));
  ++fs->urgent;
  StartFlusher();
  work_.Signal();
}

void CacheStage::HoldForChange(const Io& io, FileState* fs, uint64_t lo,
                               uint64_t hi, bool whole_file) {
  ++fs->users;  // while it waits, the lock released
  if (whole_file) {
    ++fs->urgent;
    StartFlusher();
    work_.Signal();
    while (!fs->dirty.empty() || fs->flushing != 0) flushed_.Wait(&mu_);
    --fs->urgent;
    --fs->users;
    return;
  }
  fs->pending.push_back(Pending{&io, lo, hi});
  const uint64_t bs = opts_.block_size;
  for (;;) {
    bool busy = false;
    for (auto& [b, p] : fs->dirty) {
      if (b->flushing && b->index * bs < hi && (b->index + 1) * bs > lo) {
        busy = true;
        break;
      }
    }
    if (!busy) break;
    flushed_.Wait(&mu_);
  }
  --fs->users;
}

void CacheStage::ReleaseChange(const Io& io, FileState* fs) {
  const size_t before = fs->pending.size();
  std::erase_if(fs->pending, [&io](const Pending& p) { return p.io == &io; });
  if (fs->dirty.empty()) return;
  if (io.status.ok() && io.write_data.size() >= io.header.length) {
    const uint64_t bs = opts_.block_size;
    const uint64_t off = io.header.offset;
    const uint64_t end = off + io.header.length;
    for (uint64_t i = off / bs; i * bs < end; ++i) {
      Part* p = nullptr;
      Block* b = DirtyBlock(fs, i, &p);
      if (b == nullptr) continue;
      const uint64_t bstart = i * bs;
      const uint64_t s = std::max(off, bstart);
      const uint64_t e = std::min(end, bstart + bs);
      if (b->len < s - bstart) {  // a hole between its end and the write
        std::memset(b->data() + b->len, 0, (s - bstart) - b->len);
      }
      std::memcpy(b->data() + (s - bstart), io.write_data.data() + (s - off),
                  e - s);
      SetLen(p, b,
             static_cast<uint32_t>(std::max<uint64_t>(b->len, e - bstart)));
      if (b->flushing) b->redirty = 1;
    }
  }
  if (fs->pending.size() != before) work_.Signal();
}

bool CacheStage::Held(const FileState& fs, const Block& b) const {
  const uint64_t bs = opts_.block_size;
  for (const Pending& p : fs.pending) {
    if (b.index * bs < p.hi && (b.index + 1) * bs > p.lo) return true;
  }
  return false;
}

void CacheStage::StartFlusher() {
  if (!flusher_.joinable()) {
    flusher_stop_ = false;
    flusher_ = std::thread([this] { RunFlusher(); });
  }
}

void CacheStage::StopFlusher() {
  std::thread t;
  {
    MutexLock l(&mu_);
    flusher_stop_ = true;
    work_.SignalAll();
    t = std::move(flusher_);
  }
  if (t.joinable()) t.join();
}

Block* CacheStage::PickFlush(FileState** out_fs, Part** out_part) {
  const bool any = background_ || writers_waiting_ > 0;
  for (FileState* fs : dirty_files_) {
    // First what fsyncs wait for.
    for (const FsyncWaiter& w : fs->fsync_waiters) {
      for (Block* b : w.blocks) {
        if (b->flushing || Held(*fs, *b)) continue;
        *out_fs = fs;
        *out_part = fs->dirty.at(b);
        return b;
      }
    }
  }
  for (FileState* fs : dirty_files_) {
    if (!any && !flush_all_ && fs->urgent == 0) continue;
    for (auto& [b, p] : fs->dirty) {
      if (b->flushing || Held(*fs, *b)) continue;
      *out_fs = fs;
      *out_part = p;
      return b;
    }
  }
  return nullptr;
}

void CacheStage::RunFlusher() {
  mu_.Lock();
  while (!flusher_stop_) {
    FileState* fs = nullptr;
    Part* part = nullptr;
    Block* b = nullptr;
    if (flushes_in_flight_ < opts_.max_flushes &&
        (b = PickFlush(&fs, &part)) != nullptr) {
      auto* f = new Flush;
      f->fs = fs;
      f->part = part;
      f->block = b;
      f->seq = ++flush_seq_;
      f->data.assign(b->data(), b->len);
      f->io.header.source = fs->writer;
      f->io.header.stage = config_.name();
      f->io.header.op = Op::kWrite;
      f->io.header.file = fs->name;
      f->io.header.offset = b->index * opts_.block_size;
      f->io.header.length = b->len;
      f->io.write_data = std::span<const char>(f->data.data(), f->data.size());
      f->io.set_completion([this, f](Io&) { FlushDone(f); });
      b->flushing = 1;
      b->redirty = 0;
      ++fs->flushing;
      ++flushes_in_flight_;
      flush_ios_.insert(&f->io);
      mu_.Unlock();
      // Behind the stage, as if handed back by it: rules for
      // "stage:NAME" route it (the sSwitch routes a new IO whose
      // header names the stage like one the stage forwarded).
      sswitch_->Route(&f->io);
      mu_.Lock();
      continue;
    }
    work_.Wait(&mu_);
  }
  mu_.Unlock();
}

void CacheStage::FlushDone(Flush* f) {
  std::vector<std::pair<FsyncWaiter, absl::Status>> wake;
  {
    MutexLock l(&mu_);
    flush_ios_.erase(&f->io);
    --flushes_in_flight_;
    ++flushes_;
    FileState* fs = f->fs;
    Block* b = f->block;
    --fs->flushing;
    b->flushing = 0;
    const bool again = b->redirty;
    b->redirty = 0;
    // A waiter is done with the block if the backend has its bytes of
    // the waiter's time: the flush left it clean, or was issued after the
    // waiter came; a failed block is done too (the error tells).
    for (FsyncWaiter& w : fs->fsync_waiters) {
      if (!again || f->seq > w.seq || !f->io.status.ok()) w.blocks.erase(b);
    }
    if (f->io.status.ok()) {
      if (!again) {
        b->dirty = 0;
        f->part->dirty_bytes -= b->len;
        dirty_total_ -= b->len;
        fs->dirty.erase(b);
      }
    } else {
      ++flush_errors_;
      if (fs->error.ok()) fs->error = f->io.status;
      if (!again) EraseBlock(f->part, b);
    }
    if (fs->dirty.empty()) {
      dirty_files_.erase(fs);
      dirty_file_count_.store(dirty_files_.size(), std::memory_order_release);
      fs->dirty_size = 0;
    }
    if (dirty_total_ <= opts_.dirty_low) background_ = false;
    for (auto it = fs->fsync_waiters.begin(); it != fs->fsync_waiters.end();) {
      if (!it->blocks.empty()) {
        ++it;
        continue;
      }
      absl::Status s = std::move(fs->error);
      fs->error = absl::OkStatus();
      wake.emplace_back(std::move(*it), std::move(s));
      --fs->urgent;
      it = fs->fsync_waiters.erase(it);
    }
    flushed_.SignalAll();
    work_.Signal();
  }
  delete f;
  for (auto& [w, s] : wake) {
    if (!s.ok()) {
      w.io->Complete(std::move(s));
    } else {
      (*w.forward)(w.io);  // the backend syncs the bytes it now has
    }
  }
}

absl::Status CacheStage::FlushAllAndWait() {
  flush_all_ = true;
  StartFlusher();
  work_.Signal();
  while (dirty_total_ > 0 || flushes_in_flight_ > 0) flushed_.Wait(&mu_);
  flush_all_ = false;
  absl::Status first;
  for (auto& [name, fs] : files_) {
    if (!fs->error.ok() && first.ok()) first = fs->error;
    fs->error = absl::OkStatus();
  }
  return first;
}

}  // namespace cache_internal
}  // namespace sroute

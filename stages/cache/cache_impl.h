// SPDX-License-Identifier: Apache-2.0
// The cache stage's class, shared by its files: cache_stage.cc (options,
// reads, coherence, counters, live changes) and write_back.cc (dirty
// blocks, the flusher, fsync). Internal to stages/cache/.
//
// Locking: one mutex, mu_, guards all of the cache's state; no IO is
// routed, forwarded or completed while it is held (hooks and the observer
// take it themselves). Waits on it: writers at the dirty limit and the
// observer before a change to a file with dirty blocks in flight; neither
// spins.
#ifndef SROUTE_STAGES_CACHE_CACHE_IMPL_H_
#define SROUTE_STAGES_CACHE_CACHE_IMPL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "stages/cache/block_cache.h"
#include "stages/cache/tier.h"
#include "stages/stage.h"
#include "util/mutex.h"

namespace sroute {
namespace cache_internal {

// CacheOptions, checked and with defaults filled in.
struct Options {
  enum class By { kTenant, kRule, kNone };
  uint64_t block_size = 4096;
  uint64_t default_bytes = 64ull << 20;
  absl::flat_hash_map<std::string, uint64_t> named;
  By by = By::kTenant;
  Policy policy = Policy::kS3Fifo;
  Admission admission = Admission::kAll;
  bool write_back = false;
  uint64_t dirty_limit = 0;
  uint64_t dirty_high = 0;  // bytes
  uint64_t dirty_low = 0;   // bytes
  uint32_t max_flushes = 16;
  uint64_t sequential_cutoff = 0;
  std::string tier_dir;  // "": no second tier
  uint64_t tier_bytes = 0;

  uint64_t BudgetOf(const std::string& partition) const {
    auto it = named.find(partition);
    return it == named.end() ? default_bytes : it->second;
  }
};

// InvalidArgument naming the option ("cache: block_size ...").
absl::StatusOr<Options> ParseOptions(const proto::CacheOptions& o);

// One partition: its blocks and counters.
struct Part {
  std::string name;
  std::unique_ptr<Partition> blocks;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t partial_hits = 0;
  uint64_t bytes = 0;             // valid bytes of its blocks
  uint64_t dirty_bytes = 0;       // valid bytes of its dirty blocks
  uint64_t evictions_before = 0;  // of partitions replaced by a reset
};

// A write routed to a file with dirty blocks, between its done=false and
// done=true (or its arrival here): dirty blocks it overlaps wait.
struct Pending {
  const Io* io;
  uint64_t lo, hi;  // byte range
};

// An fsync waiting for the file's blocks that were dirty when it came to
// be written back (not for later writes: no starving under writers).
struct FsyncWaiter {
  Io* io;
  const Stage::Forward* forward;  // alive while the IO is inside the stage
  uint64_t seq;  // flushes issued after it (higher seq) carry its bytes
  absl::flat_hash_set<Block*> blocks;  // still to be written back
};

// What the cache knows of one file. Kept while the file has blocks here
// (in DRAM or the tier), dirty state or waiters, or a thread holds a
// pointer to it across a release of the stage's lock (`users`); reclaimed
// otherwise, once the count of files passes a threshold (Sweep), its id
// used again.
struct FileState {
  uint32_t id = 0;
  std::string name;
  // Threads that hold this pointer with the lock released: a read's fill
  // hook, a write waiting for an edge block or for room, a change waiting
  // for flushes, a rename between its done=false and done=true.
  uint32_t users = 0;
  // Bumped by every change to the file; a fill that saw another
  // generation at its start is dropped.
  uint64_t gen = 0;
  uint64_t cached = 0;     // blocks cached in all partitions
  uint64_t max_block = 0;  // > every index cached since the last full drop
  // Indices of blocks cached (in a partition or the tier) with fewer than
  // block_size bytes: the file ended there at their fill or write. Each
  // still ends where the file does: FixShort mends every one the file
  // grows past (one slot was not enough: a second short block took it and
  // the first kept a stale end). May name blocks no longer cached.
  std::set<uint64_t> short_blocks;
  // Close-to-open: what the last open returned (ino, size, mtime, ctime,
  // the server's change stamp), 0 for none.
  uint64_t open_attr[5] = {0, 0, 0, 0, 0};
  // Sequential run detection (sequential_cutoff_bytes).
  uint64_t seq_end = 0;
  uint64_t seq_run = 0;
  // Write-back.
  absl::flat_hash_map<Block*, Part*> dirty;
  uint64_t dirty_size = 0;  // end of the furthest dirty byte
  // When the last write was taken (CLOCK_REALTIME): the file's mtime and
  // ctime while its data waits, as a local write would have set them.
  struct timespec dirty_mtime = {0, 0};
  uint32_t flushing = 0;  // flush writes in flight
  uint32_t urgent = 0;    // waiters that want all dirty blocks written
  std::string writer;     // the tenant whose write dirtied it last
  absl::Status error;     // the first failed flush, not yet reported
  std::vector<Pending> pending;
  std::vector<FsyncWaiter> fsync_waiters;
};

class CacheStage : public HostStage {
 public:
  CacheStage(proto::StageConfig config, Options opts,
             std::unique_ptr<Tier> tier, SSwitch* sswitch);
  ~CacheStage() override;

  void Submit(Io* io, const Forward& forward) override;
  proto::StageConfig config() const override;
  absl::Status Reconfigure(const proto::StageConfig& next) override;
  void Report(proto::StageStats* out) const override;
  absl::Status Stop() override;

 private:
  struct Flush;

  // --- cache_stage.cc
  void Read(Io* io, const Forward& forward);
  // Close-to-open: an open that finds the file changed since the last
  // open (another host wrote it) drops its clean blocks.
  void Open(Io* io, const Forward& forward);
  void OnChange(const Io& io, bool done);
  FileState* GetFile(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reclaims the states of files the cache holds nothing of, once there
  // are many. REQUIRES: the calling thread holds no FileState pointer.
  void MaybeSweep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Idle(const FileState& fs) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  FileState* FindFile(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Part* GetPart(const Io& io) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* InsertBlock(Part* part, FileState* fs, uint64_t index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseBlock(Part* part, Block* b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets a block's valid length, keeping bytes and dirty_bytes right.
  void SetLen(Part* part, Block* b, uint32_t len)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the clean blocks of [lo, hi) (all of the file for hi == max) in
  // every partition.
  void DropClean(FileState* fs, uint64_t lo, uint64_t hi,
                 const Part* except = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a write that reached `end`: the short blocks before `end` no
  // longer mark the end of the file (clean: dropped; dirty: zero-padded).
  void FixShort(FileState* fs, uint64_t end) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether short block `index` may be taken as the file's end: no short
  // block after it is cached (forgets those that are not).
  bool EndsFile(FileState* fs, uint64_t index)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the short blocks no longer cached anywhere.
  void PruneShort(FileState* fs) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Cached(const FileState& fs, uint64_t index) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkDirty(Part* part, FileState* fs, Block* b)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The dirty (or flushing) block of `index` in any partition, or null.
  Block* DirtyBlock(FileState* fs, uint64_t index, Part** part = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the blocks of [first, last] missing in `part` back from the
  // second tier, as far as they are there.
  void Promote(Part* part, FileState* fs, uint64_t first, uint64_t last)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes partitions match opts_ (budgets; all dropped if `reset`).
  void ApplyBudgets(bool reset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // --- write_back.cc
  void WriteBack(Io* io, const Forward& forward);
  // A write's block size, its bytes [off, end) and the blocks [first,
  // last] they touch (REQUIRES: a length of 1 or more).
  struct WriteSpan {
    uint64_t bs, off, end, first, last;
  };
  WriteSpan SpanOf(const Io& io) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WriteBack's phases, in order.
  void FillEdges(const Io& io, FileState* fs, Part* part)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool WaitForDirtyRoom(const Io& io, FileState* fs, Part* part)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool PinDirty(FileState* fs, Part* part, uint64_t first, uint64_t last,
                std::vector<Block*>* blocks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CopyIn(const Io& io, FileState* fs, Part* part,
              const std::vector<Block*>& blocks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Fsync(Io* io, const Forward& forward);
  // Adds the hook that shows the file's size with its dirty bytes.
  void ShowDirtySize(Io* io);
  // Before a change to fs's bytes in [lo, hi) reaches the backend: waits
  // for flushes in flight there (and, for whole-file changes, writes every
  // dirty block first); a write then holds the dirty blocks it overlaps.
  void HoldForChange(const Io& io, FileState* fs, uint64_t lo, uint64_t hi,
                     bool whole_file) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After an external write: patch dirty blocks, release the hold.
  void ReleaseChange(const Io& io, FileState* fs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartFlusher() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RunFlusher();
  Block* PickFlush(FileState** fs, Part** part)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Held(const FileState& fs, const Block& b) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendFlush(Flush* f);
  void FlushDone(Flush* f);
  // Writes every dirty block back and waits; the first error of a file's
  // flush (also reported and cleared there).
  absl::Status FlushAllAndWait() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopFlusher() ABSL_LOCKS_EXCLUDED(mu_);

  // Tells the sSwitch whether closes (Op::kFlush) should reach this
  // stage: in write-back mode, so close(2) returns once the file's dirty
  // blocks are written back.
  void WantFlushes(bool on) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SSwitch* const sswitch_;
  uint64_t observer_id_ = 0;
  bool wants_flushes_ ABSL_GUARDED_BY(mu_) = false;

  mutable Mutex mu_;
  proto::StageConfig config_ ABSL_GUARDED_BY(mu_);
  Options opts_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<Part>> parts_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<FileState>> files_
      ABSL_GUARDED_BY(mu_);
  std::vector<FileState*> file_by_id_ ABSL_GUARDED_BY(mu_);  // null: free
  std::vector<uint32_t> free_ids_ ABSL_GUARDED_BY(mu_);
  size_t sweep_at_ ABSL_GUARDED_BY(mu_) = kMinSweep;
  uint64_t files_reclaimed_ ABSL_GUARDED_BY(mu_) = 0;
  static constexpr size_t kMinSweep = 1024;
  // Stage-wide counters beyond the partitions' sums.
  std::unique_ptr<Tier> tier_ ABSL_GUARDED_BY(mu_);  // or null
  uint64_t tier_hits_ ABSL_GUARDED_BY(mu_) = 0;      // blocks taken back
  uint64_t bypassed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t open_drops_ ABSL_GUARDED_BY(mu_) = 0;  // close-to-open drops
  uint64_t fills_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evictions_gone_ ABSL_GUARDED_BY(mu_) = 0;  // of dropped parts
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;

  // Write-back.
  uint64_t dirty_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dirty_peak_ ABSL_GUARDED_BY(mu_) = 0;
  bool background_ ABSL_GUARDED_BY(mu_) = false;  // between watermarks
  bool flush_all_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t writers_waiting_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t flushes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t flushes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t flush_seq_ ABSL_GUARDED_BY(mu_) = 0;  // of the last flush issued
  uint64_t flush_errors_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writes_waited_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t read_fills_ ABSL_GUARDED_BY(mu_) = 0;  // edge blocks read first
  // Flush IOs in flight (the observer ignores them) and write-back writes
  // completed here whose done=true has not come yet.
  absl::flat_hash_set<const Io*> flush_ios_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<const Io*> own_ ABSL_GUARDED_BY(mu_);
  // Writes between the observer's done=false and done=true (write-back).
  absl::flat_hash_set<const Io*> observed_ ABSL_GUARDED_BY(mu_);
  // Renames between done=false and done=true: the other name's state (the
  // endpoint may rewrite args.second_file on the way).
  absl::flat_hash_map<const Io*, FileState*> renames_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<FileState*> dirty_files_ ABSL_GUARDED_BY(mu_);
  // dirty_files_.size(), for a look without the lock (ShowDirtySize).
  std::atomic<size_t> dirty_file_count_{0};
  CondVar work_;     // the flusher has something to do
  CondVar flushed_;  // a flush ended (space, clean files)
  bool flusher_stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread flusher_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cache_internal
}  // namespace sroute

#endif  // SROUTE_STAGES_CACHE_CACHE_IMPL_H_

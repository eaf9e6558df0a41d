// SPDX-License-Identifier: Apache-2.0
// The index and eviction policies of the cache stage (stages/cache/): one
// Partition holds cached blocks keyed by (file id, block index) within a
// budget of blocks and evicts by LRU or S3-FIFO.
//
//   Partition p(Policy::kS3Fifo, /*capacity_blocks=*/1024,
//   /*block_size=*/4096); if (Block* b = p.Lookup(file, index)) { /* hit:
//   b->data(), b->len */ } else if (Block* b = p.Insert(file, index)) { /* fill
//   b->data() */ }
//
// S3-FIFO (Yang et al., SOSP'23) is the default: a small FIFO (10% of the
// blocks) takes new blocks and sends those not read again to a ghost queue
// of keys, so one-hit wonders and scans pass through the small queue without
// touching the hot set in the main FIFO; a hit only bumps a 2-bit counter
// (no list move, unlike LRU), which keeps hits cheap under a lock. With
// frequency admission (the stage's admission=frequency) the small queue is
// a window of 1 % and a FrequencySketch decides, W-TinyLFU's way, whether
// the window's oldest block takes the place of the main queue's next victim
// (the one asked for more often lately stays): under a steady Zipf(0.99)
// with a partition of a tenth of the blocks, hit ratio 0.777 against
// S3-FIFO's 0.768, LRU's 0.715 and a static oracle's 0.793; but when the
// hot set moves, the counts of the old one hold it back (0.745-0.756
// against S3-FIFO's 0.766): bench/RESULTS.md, "Cache admission".
//
// Metadata per cached block: sizeof(Block) == 32 bytes (the block's bytes
// follow it in the same allocation, so no pointer to them and one malloc
// header, 8 bytes, per block) plus the index, an absl::flat_hash_set of
// pointers: 8 bytes of slot and 1 control byte per slot, at load 7/16..7/8,
// 10..21 bytes per block. Total 50..61 bytes (kMetadataBytesPerBlock, the
// worst case). The ghost queue adds about 24 bytes per ghost key, at most
// one key per block of capacity; frequency admission uses no ghost queue
// and a sketch of 2-4 bytes per block of capacity instead.
//
// Thread safety: none; the cache stage holds its lock around every call.
#ifndef SROUTE_STAGES_CACHE_BLOCK_CACHE_H_
#define SROUTE_STAGES_CACHE_BLOCK_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "stages/cache/frequency_sketch.h"

namespace sroute {

enum class Policy { kLru, kS3Fifo };

// Which blocks S3-FIFO lets into its main queue when the queue is full:
// every one the policy promotes (kAll), or only one asked for more often
// than the main queue's next victim, by a FrequencySketch (kFrequency:
// TinyLFU's admission).
enum class Admission { kAll, kFrequency };

// One cached block; its bytes follow it in memory (data()).
struct Block {
  uint64_t index = 0;  // block number in the file
  Block* prev = nullptr;
  Block* next = nullptr;
  uint32_t file = 0;  // the file's id (cache stage)
  // Valid bytes (block size, or less where the file ended at the fill).
  uint32_t len : 21 = 0;
  uint32_t freq : 2 = 0;      // S3-FIFO: reads since insertion, capped at 3
  uint32_t in_main : 1 = 0;   // S3-FIFO: in the main FIFO (else small)
  uint32_t dirty : 1 = 0;     // write-back: newer than the backend
  uint32_t flushing : 1 = 0;  // write-back: a flush of it is in flight
  uint32_t redirty : 1 = 0;   // write-back: written during its flush

  char* data() { return reinterpret_cast<char*>(this + 1); }
  const char* data() const { return reinterpret_cast<const char*>(this + 1); }
};
static_assert(sizeof(Block) == 32);

// The worst-case figure of the header comment.
inline constexpr size_t kMetadataBytesPerBlock = 61;

// The ghost queue's key of a block: the index itself for file 0 (exact,
// tests), a mix for others (a collision only misplaces one block).
inline uint64_t GhostKey(uint32_t file, uint64_t index) {
  return index ^ (static_cast<uint64_t>(file) * 0x9E3779B97F4A7C15ull);
}

class Partition {
 public:
  Partition(Policy policy, uint64_t capacity_blocks, size_t block_size,
            Admission admission = Admission::kAll);
  ~Partition();
  Partition(const Partition&) = delete;
  Partition& operator=(const Partition&) = delete;

  // The block, or null; no effect on eviction order.
  Block* Find(uint32_t file, uint64_t index) const;
  // The block, or null; a found block counts as read (policy).
  Block* Lookup(uint32_t file, uint64_t index);
  // Adds a block not present (len 0, bytes zeroed), evicting others to
  // make room (never dirty or flushing ones). Null if no room: capacity 0
  // or every block is dirty.
  Block* Insert(uint32_t file, uint64_t index);
  // Frees `b` (not counted as an eviction). REQUIRES: b is in here.
  void Erase(Block* b);
  // Shrinks (evicting) or grows the budget.
  void SetCapacity(uint64_t capacity_blocks);

  // Calls fn for every block (fn must not change the partition).
  void ForEach(const std::function<void(Block*)>& fn) const;

  Policy policy() const { return policy_; }
  uint64_t capacity() const { return capacity_; }
  size_t size() const { return index_.size(); }
  size_t block_size() const { return block_size_; }
  uint64_t evictions() const { return evictions_; }
  // Called with each block evicted, before it is freed.
  void set_on_evict(std::function<void(Block*)> fn) {
    on_evict_ = std::move(fn);
  }

 private:
  struct List {
    Block* head = nullptr;  // newest
    Block* tail = nullptr;  // oldest
    size_t size = 0;
    void PushHead(Block* b);
    void Remove(Block* b);
  };
  struct Key {
    uint32_t file;
    uint64_t index;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(const Block* b) const {
      return (*this)({b->file, b->index});
    }
    size_t operator()(const Key& k) const;
  };
  struct Eq {
    using is_transparent = void;
    static Key K(const Block* b) { return {b->file, b->index}; }
    static Key K(const Key& k) { return k; }
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return K(a).file == K(b).file && K(a).index == K(b).index;
    }
  };

  // Evicts one block; false if none can go.
  bool EvictOne();
  bool EvictSmall();
  bool EvictMain();
  void Drop(Block* b);  // unlink, unindex, free (an eviction)
  void Free(Block* b);
  void AddGhost(uint64_t key);
  size_t SmallTarget() const;
  // With Admission::kFrequency: evicts the less asked-for of the small
  // queue's oldest block and main's next victim (MainVictim, or null if
  // every block there is pinned).
  bool EvictAdmitting();
  Block* MainVictim();

  Policy policy_;
  uint64_t capacity_;
  size_t block_size_;
  absl::flat_hash_set<Block*, Hash, Eq> index_;
  List small_;  // S3-FIFO small queue
  List main_;   // LRU list, or the S3-FIFO main queue
  // Ghost keys, oldest first, with the sequence number of their insertion;
  // a queued key is live while ghost_ maps it to that number.
  std::deque<std::pair<uint64_t, uint64_t>> ghost_queue_;
  absl::flat_hash_map<uint64_t, uint64_t> ghost_;
  uint64_t ghost_seq_ = 0;
  uint64_t evictions_ = 0;
  std::function<void(Block*)> on_evict_;
  std::unique_ptr<FrequencySketch> sketch_;  // with Admission::kFrequency
};

}  // namespace sroute

#endif  // SROUTE_STAGES_CACHE_BLOCK_CACHE_H_

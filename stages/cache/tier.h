// SPDX-License-Identifier: Apache-2.0
// The cache stage's second tier (CacheOptions.tier_dir, tier_bytes): clean
// blocks evicted from DRAM are kept in one file on a local SSD, in slots
// of one block, replaced oldest first (FIFO: a ring); a read that misses
// in DRAM takes them back from here (and out of the tier).
//
//   auto tier = Tier::Open("/ssd", "cacheA", 1 << 30, 4096);
//   (*tier)->Put(file, index, data, len);
//   int64_t len = (*tier)->Take(file, index, out);  // -1: not there
//
// One tier serves every partition of the stage (its budget is the
// stage's, not a tenant's). Only clean blocks come here; the stage drops
// a file's entries whenever it drops the file's DRAM blocks.
//
// Thread safety: none; the cache stage holds its lock around every call
// (file IO under that lock: a local SSD's page cache, short).
#ifndef SROUTE_STAGES_CACHE_TIER_H_
#define SROUTE_STAGES_CACHE_TIER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace sroute {

class Tier {
 public:
  // Makes DIR/.sroute-cache-STAGE-PID-N.tier for `bytes` bytes of blocks.
  // InvalidArgument naming tier_dir if it cannot.
  static absl::StatusOr<std::unique_ptr<Tier>> Open(const std::string& dir,
                                                    const std::string& stage,
                                                    uint64_t bytes,
                                                    size_t block_size);
  // Closes and removes the file.
  ~Tier();
  Tier(const Tier&) = delete;
  Tier& operator=(const Tier&) = delete;

  // Keeps a copy of `len` bytes of block (file, index), replacing the
  // oldest slot when full. A write error only loses the copy.
  void Put(uint32_t file, uint64_t index, const char* data, uint32_t len);
  // Moves the block into `out` (block_size bytes) and out of the tier:
  // its length, or -1 if it is not here (or could not be read).
  int64_t Take(uint32_t file, uint64_t index, char* out);
  bool Contains(uint32_t file, uint64_t index) const {
    return index_.contains(Key{file, index});
  }
  // Whether any block of `file` is here.
  bool HoldsFile(uint32_t file) const { return per_file_.contains(file); }
  // Drops the file's blocks with index in [first, last].
  void Drop(uint32_t file, uint64_t first, uint64_t last);
  void Clear();

  uint64_t used_bytes() const { return used_bytes_; }
  uint64_t evictions() const { return evictions_; }

 private:
  using Key = std::pair<uint32_t, uint64_t>;
  struct Slot {
    uint32_t file = 0;
    uint32_t len = 0;  // 0: free
    uint64_t index = 0;
  };
  Tier(std::string path, int fd, uint64_t slots, size_t block_size);
  void Free(uint32_t slot);

  std::string path_;
  int fd_;
  size_t block_size_;
  std::vector<Slot> slots_;
  absl::flat_hash_map<Key, uint32_t> index_;
  absl::flat_hash_map<uint32_t, uint64_t> per_file_;  // blocks per file
  uint32_t hand_ = 0;  // the next slot to fill (the oldest)
  uint64_t used_bytes_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace sroute

#endif  // SROUTE_STAGES_CACHE_TIER_H_

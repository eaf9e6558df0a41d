// SPDX-License-Identifier: Apache-2.0
// How often each block was asked for lately, approximately: a count-min
// sketch of 4-bit counters with aging (TinyLFU, Einziger et al., ACM ToS
// 2017), which the cache's S3-FIFO consults before a block enters its main
// queue: a block comes in only if it was asked for more often than the one
// it would push out, so a stream of blocks asked for twice does not wash
// out blocks asked for all the time.
//
//   FrequencySketch sketch(/*capacity_blocks=*/6554);
//   sketch.Increment(key);              // on every read or fill of a block
//   if (sketch.Estimate(a) > sketch.Estimate(b)) { /* a is the hotter */ }
//
// Four rows of counters, each at least as wide as the capacity (a power of
// two): 4 x 4 bits per counter column, 2 bytes per block of capacity (2-4:
// the width rounds up), plus the vector's header. Counts saturate at 15;
// once 10 x the capacity increments have been made, every counter is
// halved (aging: the sketch follows what is hot now, not what was).
// Conservative update (only the smallest of a key's counters grow) keeps
// collisions from inflating estimates.
//
// Thread safety: none; the cache stage holds its lock around every call.
#ifndef SROUTE_STAGES_CACHE_FREQUENCY_SKETCH_H_
#define SROUTE_STAGES_CACHE_FREQUENCY_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sroute {

class FrequencySketch {
 public:
  explicit FrequencySketch(uint64_t capacity_blocks);

  // Sizes the sketch for a new capacity: the counts stay if its rows keep
  // their width, else they start again from 0.
  void Resize(uint64_t capacity_blocks);
  // Counts one more ask for `key`.
  void Increment(uint64_t key);
  // How often `key` was asked for lately (0..15), never less than the
  // truth since the last aging halved it.
  uint32_t Estimate(uint64_t key) const;

  size_t bytes() const { return table_.size() * sizeof(uint64_t); }
  // Increments until the next halving.
  uint64_t sample_size() const { return sample_; }

 private:
  static constexpr int kRows = 4;
  // The counter of `row` for a key hashed to `h`: word and nibble.
  size_t Slot(uint64_t h, int row) const;
  uint32_t Get(size_t slot) const;
  void Halve();

  std::vector<uint64_t> table_;  // 16 counters per word, the rows in turn
  uint64_t width_ = 0;           // counters per row (a power of two)
  uint64_t additions_ = 0;
  uint64_t sample_ = 0;
};

}  // namespace sroute

#endif  // SROUTE_STAGES_CACHE_FREQUENCY_SKETCH_H_

// SPDX-License-Identifier: Apache-2.0
#include "stages/cache/frequency_sketch.h"

#include <algorithm>
#include <bit>

namespace sroute {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

FrequencySketch::FrequencySketch(uint64_t capacity_blocks) {
  Resize(capacity_blocks);
}

void FrequencySketch::Resize(uint64_t capacity_blocks) {
  sample_ = 10 * std::max<uint64_t>(capacity_blocks, 1);
  const uint64_t width = std::bit_ceil(std::max<uint64_t>(capacity_blocks, 16));
  if (width == width_) return;
  width_ = width;
  table_.assign(kRows * width_ / 16, 0);
  additions_ = 0;
}

size_t FrequencySketch::Slot(uint64_t h, int row) const {
  // Double hashing: row r takes h1 + r * h2, each row its own range.
  const uint64_t h1 = h, h2 = (h >> 32) | 1;
  return static_cast<size_t>(row) * width_ +
         static_cast<size_t>((h1 + static_cast<uint64_t>(row) * h2) &
                             (width_ - 1));
}

uint32_t FrequencySketch::Get(size_t slot) const {
  return static_cast<uint32_t>((table_[slot / 16] >> (4 * (slot % 16))) & 15);
}

uint32_t FrequencySketch::Estimate(uint64_t key) const {
  const uint64_t h = Mix(key);
  uint32_t least = 15;
  for (int r = 0; r < kRows; ++r) least = std::min(least, Get(Slot(h, r)));
  return least;
}

void FrequencySketch::Increment(uint64_t key) {
  const uint64_t h = Mix(key);
  size_t slots[kRows];
  uint32_t least = 15;
  for (int r = 0; r < kRows; ++r) {
    slots[r] = Slot(h, r);
    least = std::min(least, Get(slots[r]));
  }
  if (least == 15) return;  // saturated
  for (size_t slot : slots) {
    if (Get(slot) == least)
      table_[slot / 16] += uint64_t{1} << (4 * (slot % 16));
  }
  if (++additions_ >= sample_) Halve();
}

void FrequencySketch::Halve() {
  for (uint64_t& word : table_) word = (word >> 1) & 0x7777777777777777ull;
  additions_ /= 2;
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
#include "endpoints/flash_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>

#include "util/log.h"
#include "util/strings.h"

namespace sroute {

const char* GcNeedName(GcNeed need) {
  switch (need) {
    case GcNeed::kNone:
      return "none";
    case GcNeed::kSoft:
      return "soft";
    case GcNeed::kRegular:
      return "regular";
  }
  return "?";
}

absl::StatusOr<FlashOptions> FlashModel::Preset(const std::string& name) {
  FlashOptions o;
  if (name == "rackblox" || name.empty()) return o;
  if (name == "small") {
    o.geometry.channels = 2;
    o.geometry.dies_per_channel = 2;
    o.geometry.blocks_per_die = 16;
    o.geometry.pages_per_block = 16;
    o.geometry.spare = 0.5;
    o.timing.buffer_pages = 8;
    return o;
  }
  // The pool (issue 49): small dies' worth of the devices Sandook measured,
  // a tenth of their rates in model time. A worn device retries reads
  // (longer) and programs slowly; the fast one has more, quicker dies.
  if (name == "worn" || name == "healthy" || name == "fast") {
    o.geometry.channels = 2;
    o.geometry.blocks_per_die = 128;
    o.geometry.pages_per_block = 64;
    o.timing.buffer_pages = 256;
    // GC in short passes (a few blocks at a time), as a device in its
    // steady state reclaims: write mixes pay for it evenly.
    o.timing.erase_ns = 1'500'000;
    o.gc_threshold = 0.10;
    o.soft_threshold = 0.12;
    o.gc_target = 0.14;
    if (name == "worn") {
      o.geometry.dies_per_channel = 2;
      o.timing.read_ns = 100'000;
      o.timing.program_ns = 320'000;
      o.timing.suspend_ns = 40'000;
    } else if (name == "healthy") {
      o.geometry.dies_per_channel = 2;
      o.timing.read_ns = 80'000;
      o.timing.program_ns = 240'000;
      o.timing.suspend_ns = 30'000;
    } else {
      o.geometry.dies_per_channel = 5;
      o.timing.read_ns = 60'000;
      o.timing.program_ns = 180'000;
      o.timing.suspend_ns = 20'000;
    }
    return o;
  }
  return absl::InvalidArgumentError(
      StrCat("flash: no preset named '", name,
             "' (rackblox, small, worn, healthy, fast)"));
}

absl::Status FlashModel::Check(const FlashOptions& o) {
  const FlashGeometry& g = o.geometry;
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(StrCat("flash: ", why));
  };
  if (g.channels == 0 || g.dies_per_channel == 0) {
    return bad("channels and dies_per_channel must be at least 1");
  }
  if (g.blocks_per_die < 4) return bad("blocks_per_die must be at least 4");
  if (g.pages_per_block < 2) return bad("pages_per_block must be at least 2");
  if (g.page_bytes < 512 || (g.page_bytes & (g.page_bytes - 1)) != 0) {
    return bad("page_bytes must be a power of two, at least 512");
  }
  if (g.raw_pages() >= kUnmapped) {
    return bad(StrCat(g.raw_pages(), " pages are too many (at most 2^32-2)"));
  }
  if (!(g.spare > 0 && g.spare < 0.9) || g.spare * g.blocks_per_die < 2.0) {
    return bad(StrCat("spare ", g.spare,
                      " must be below 0.9 and leave each die at least 2 of "
                      "its ",
                      g.blocks_per_die, " blocks"));
  }
  if (!(o.gc_threshold > 0 && o.gc_threshold <= o.soft_threshold &&
        o.soft_threshold < o.gc_target && o.gc_target < 1)) {
    return bad(StrCat("thresholds must be 0 < gc_threshold (", o.gc_threshold,
                      ") <= soft_threshold (", o.soft_threshold,
                      ") < gc_target (", o.gc_target, ") < 1"));
  }
  if (!(o.idle_alpha > 0 && o.idle_alpha <= 1)) {
    return bad("idle_alpha must be in (0, 1]");
  }
  if (o.timing.buffer_pages == 0) return bad("buffer_pages must be at least 1");
  return absl::OkStatus();
}

FlashModel::FlashModel(const FlashOptions& options)
    : o_(options),
      g_(o_.geometry),
      logical_pages_(g_.logical_pages()),
      l2p_(logical_pages_, kUnmapped),
      p2l_(g_.raw_pages(), kUnmapped),
      buffered_until_(logical_pages_, 0),
      dies_(g_.dies()) {
  for (Die& d : dies_) {
    d.blocks.resize(g_.blocks_per_die);
    for (uint32_t b = g_.blocks_per_die; b > 0; --b) {
      d.free_blocks.push_back(b - 1);
    }
  }
  free_blocks_ = uint64_t{g_.dies()} * g_.blocks_per_die;
}

void FlashModel::NoteIo(uint64_t now) {
  if (last_io_ns_ != 0 && now >= last_io_ns_ + o_.idle_min_ns) {
    const double gap = static_cast<double>(now - last_io_ns_);
    predicted_idle_ns_ =
        o_.idle_alpha * gap + (1 - o_.idle_alpha) * predicted_idle_ns_;
  }
  last_io_ns_ = std::max(last_io_ns_, now);
}

FlashModel::Result FlashModel::Read(uint64_t lpn, uint64_t now) {
  NoteIo(now);
  ++counters_.reads;
  const uint32_t ppn = l2p_[lpn];
  if (ppn == kUnmapped || buffered_until_[lpn] > now) {
    return {now + o_.timing.buffer_ns, false};  // zeros, or from DRAM
  }
  Die& d = dies_[ppn / (g_.blocks_per_die * g_.pages_per_block)];
  const uint64_t gc_free = GcFreeAt(d, now);
  const bool behind_gc = gc_free > now;
  uint64_t start = std::max({now, d.read_free_ns, gc_free});
  if (o_.timing.suspend_ns > 0 && d.program_free_ns > start) {
    // A program under way suspends for the read and ends later by both;
    // it resumes between reads (firmware keeps programs moving), so each
    // read on a programming die pays the suspension.
    const uint64_t wait =
        std::min(o_.timing.suspend_ns, d.program_free_ns - start);
    start += wait;
    d.program_free_ns += o_.timing.read_ns + wait;
  }
  d.read_free_ns = start + o_.timing.read_ns;
  if (behind_gc) ++counters_.reads_behind_gc;
  return {d.read_free_ns, behind_gc};
}

FlashModel::Result FlashModel::Write(uint64_t lpn, uint64_t now) {
  NoteIo(now);
  ++counters_.writes;
  while (!buffer_.empty() && buffer_.top() <= now) buffer_.pop();
  uint64_t in_buffer = now;
  if (buffer_.size() >= o_.timing.buffer_pages) {
    in_buffer = buffer_.top();  // the oldest page's slot
    buffer_.pop();
    ++counters_.writes_waited;
  }
  const uint32_t die = next_die_;
  next_die_ = (next_die_ + 1) % g_.dies();
  const uint32_t ppn = AllocatePage(die, in_buffer);
  Die& d = dies_[die];
  const uint64_t start =
      std::max({in_buffer, d.program_free_ns, GcFreeAt(d, in_buffer)});
  d.program_free_ns = start + o_.timing.program_ns;
  if (l2p_[lpn] != kUnmapped) Invalidate(l2p_[lpn]);
  l2p_[lpn] = ppn;
  p2l_[ppn] = static_cast<uint32_t>(lpn);
  ++d.blocks[(ppn / g_.pages_per_block) % g_.blocks_per_die].valid;
  buffered_until_[lpn] = d.program_free_ns;
  buffer_.push(d.program_free_ns);
  const bool waited = in_buffer > now;
  return {in_buffer + o_.timing.buffer_ns, waited};
}

void FlashModel::Trim(uint64_t lpn, uint64_t now) {
  NoteIo(now);
  ++counters_.trims;
  if (l2p_[lpn] == kUnmapped) return;
  Invalidate(l2p_[lpn]);
  l2p_[lpn] = kUnmapped;
  buffered_until_[lpn] = 0;
}

void FlashModel::Invalidate(uint32_t ppn) {
  p2l_[ppn] = kUnmapped;
  const uint32_t block_of_all = ppn / g_.pages_per_block;
  Die& d = dies_[block_of_all / g_.blocks_per_die];
  --d.blocks[block_of_all % g_.blocks_per_die].valid;
}

bool FlashModel::HasRoom(const Die& d) const {
  return d.active >= 0 && d.blocks[static_cast<uint32_t>(d.active)].next_page <
                              g_.pages_per_block;
}

void FlashModel::OpenBlock(Die& d) {
  if (d.active >= 0) {
    d.blocks[static_cast<uint32_t>(d.active)].state = BlockState::kFull;
  }
  const uint32_t b = d.free_blocks.back();
  d.free_blocks.pop_back();
  --free_blocks_;
  d.blocks[b].state = BlockState::kActive;
  d.blocks[b].next_page = 0;
  d.active = static_cast<int32_t>(b);
}

uint32_t FlashModel::AllocatePage(uint32_t die, uint64_t now) {
  Die& d = dies_[die];
  if (!HasRoom(d)) {
    // The last free block is GC's, to copy into: with only that left,
    // collect now, whatever the coordinator says.
    if (d.free_blocks.size() <= 1) {
      ++counters_.forced_gc;
      CollectLocked(die, now);
    }
    if (o_.mode == GcMode::kAuto && static_cast<double>(d.free_blocks.size()) <
                                        o_.gc_threshold * g_.blocks_per_die) {
      CollectLocked(die, now);
    }
    if (o_.mode == GcMode::kSelf && Need() == GcNeed::kRegular) StartGc(now);
    if (!HasRoom(d)) {  // (GC may have opened a block with room)
      if (d.free_blocks.empty()) {
        // Check() leaves every die spare blocks and writes go to the dies
        // in turn, so each die has invalid pages to reclaim: not reached.
        LogError("flash: die ", die, " has no free block after GC");
        std::abort();
      }
      OpenBlock(d);
    }
  }
  const uint32_t b = static_cast<uint32_t>(d.active);
  return Ppn(die, b, d.blocks[b].next_page++);
}

uint64_t FlashModel::CollectLocked(uint32_t die, uint64_t from,
                                   uint64_t until) {
  Die& d = dies_[die];
  // A pass that yields to host IO begins at once (after a pass under
  // way); one that holds the die waits for the IO queued on it.
  uint64_t t =
      o_.gc_yields
          ? std::max(from, d.gc_until_ns)
          : std::max({from, d.gc_until_ns, d.program_free_ns, d.read_free_ns});
  // A pass after the last one ended has steps of its own; one that
  // follows a pass under way adds to its steps.
  if (d.gc_until_ns <= from) {
    d.gc_steps.clear();
    d.gc_from_ns = t;
  }
  const double target = o_.gc_target * g_.blocks_per_die;
  bool erased = false;
  for (uint32_t pass = 0; pass < g_.blocks_per_die &&
                          static_cast<double>(d.free_blocks.size()) < target;
       ++pass) {
    if (t >= until) break;  // a background pass: the idle time is over
    // Greedy: the full block with the fewest valid pages.
    int32_t victim = -1;
    for (uint32_t b = 0; b < g_.blocks_per_die; ++b) {
      if (d.blocks[b].state != BlockState::kFull) continue;
      if (victim < 0 ||
          d.blocks[b].valid < d.blocks[static_cast<uint32_t>(victim)].valid) {
        victim = static_cast<int32_t>(b);
      }
    }
    if (victim < 0) break;
    const uint32_t v = static_cast<uint32_t>(victim);
    if (d.blocks[v].valid >= g_.pages_per_block) break;  // nothing to gain
    // Its valid pages move to the die's active block (a fresh one when
    // that fills; the victim's invalid pages pay for it).
    for (uint32_t p = 0; p < g_.pages_per_block && d.blocks[v].valid > 0; ++p) {
      const uint32_t from_ppn = Ppn(die, v, p);
      const uint32_t lpn = p2l_[from_ppn];
      if (lpn == kUnmapped) continue;
      if (!HasRoom(d)) {
        if (d.free_blocks.empty()) break;  // not with spare blocks
        OpenBlock(d);
      }
      const uint32_t ab = static_cast<uint32_t>(d.active);
      const uint32_t to_ppn = Ppn(die, ab, d.blocks[ab].next_page++);
      p2l_[to_ppn] = lpn;
      l2p_[lpn] = to_ppn;
      ++d.blocks[ab].valid;
      p2l_[from_ppn] = kUnmapped;
      --d.blocks[v].valid;
      t += o_.timing.read_ns + o_.timing.program_ns;
      if (o_.gc_yields) d.gc_steps.push_back(t);
      ++counters_.pages_copied;
    }
    if (d.blocks[v].valid != 0) break;
    Block& blk = d.blocks[v];
    blk.state = BlockState::kFree;
    blk.next_page = 0;
    ++blk.erases;
    d.free_blocks.push_back(v);
    ++free_blocks_;
    t += o_.timing.erase_ns;
    if (o_.gc_yields) d.gc_steps.push_back(t);
    ++counters_.erases;
    erased = true;
  }
  if (erased) ++counters_.gc_passes;
  d.gc_until_ns = std::max(d.gc_until_ns, t);
  if (!o_.gc_yields) d.program_free_ns = std::max(d.program_free_ns, t);
  return d.gc_until_ns;
}

uint64_t FlashModel::StartGc(uint64_t now, uint64_t until_ns) {
  uint64_t end = now;
  for (uint32_t die = 0; die < g_.dies(); ++die) {
    end = std::max(end, CollectLocked(die, now, until_ns));
  }
  return end;
}

uint64_t FlashModel::HoldForGc(uint64_t now, uint64_t until_ns) {
  uint64_t end = now;
  for (Die& d : dies_) {
    uint64_t t = std::max(now, d.gc_until_ns);
    if (d.gc_until_ns <= now) {
      d.gc_steps.clear();
      d.gc_from_ns = t;
    }
    while (t < until_ns) {
      t += o_.timing.erase_ns;
      if (o_.gc_yields) d.gc_steps.push_back(t);
    }
    d.gc_until_ns = std::max(d.gc_until_ns, t);
    if (!o_.gc_yields) d.program_free_ns = std::max(d.program_free_ns, t);
    end = std::max(end, d.gc_until_ns);
  }
  ++counters_.gc_passes;
  return end;
}

uint64_t FlashModel::GcFreeAt(const Die& d, uint64_t now) const {
  if (d.gc_until_ns <= now) return now;
  if (!o_.gc_yields) return d.gc_until_ns;
  if (now < d.gc_from_ns) return now;  // it has not begun
  // The end of the step under way at `now`.
  auto it = std::upper_bound(d.gc_steps.begin(), d.gc_steps.end(), now);
  return it == d.gc_steps.end() ? d.gc_until_ns : *it;
}

void FlashModel::Warm(const std::vector<uint32_t>& lpns, double overwrites,
                      uint64_t seed) {
  for (uint32_t lpn : lpns) Write(lpn, 0);
  const uint64_t n = lpns.size();
  std::mt19937_64 rng(seed);
  const auto more = static_cast<uint64_t>(overwrites * static_cast<double>(n));
  for (uint64_t i = 0; i < more && n > 0; ++i) Write(lpns[rng() % n], 0);
  StartGc(0);
  ForgetTime();
}

void FlashModel::ForgetTime() {
  for (Die& d : dies_) {
    d.read_free_ns = d.program_free_ns = d.gc_until_ns = d.gc_from_ns = 0;
    d.gc_steps.clear();
  }
  std::fill(buffered_until_.begin(), buffered_until_.end(), 0);
  buffer_ = {};
  last_io_ns_ = 0;
  predicted_idle_ns_ = 0;
  counters_ = FlashState{};
}

uint64_t FlashModel::CollectDie(uint32_t die, uint64_t now) {
  return CollectLocked(die, now);
}

double FlashModel::FreeRatio() const {
  return static_cast<double>(free_blocks_) /
         static_cast<double>(uint64_t{g_.dies()} * g_.blocks_per_die);
}

GcNeed FlashModel::Need() const {
  const double free = FreeRatio();
  if (free < o_.gc_threshold) return GcNeed::kRegular;
  if (free < o_.soft_threshold) return GcNeed::kSoft;
  return GcNeed::kNone;
}

bool FlashModel::InGc(uint64_t now) const {
  for (const Die& d : dies_) {
    if (d.gc_until_ns > now) return true;
  }
  return false;
}

FlashState FlashModel::State(uint64_t now, bool wear) const {
  FlashState s = counters_;
  s.free_ratio = FreeRatio();
  s.need = Need();
  s.predicted_idle_ns = static_cast<uint64_t>(predicted_idle_ns_);
  for (const Die& d : dies_) {
    s.gc_until_ns = std::max(s.gc_until_ns, d.gc_until_ns);
  }
  s.gc_active = s.gc_until_ns > now;
  s.idle_for_ns = now > last_io_ns_ ? now - last_io_ns_ : 0;
  s.bg_ok = s.idle_for_ns >= o_.idle_min_ns &&
            s.predicted_idle_ns >= o_.bg_idle_ns && s.free_ratio < o_.gc_target;
  if (!wear) return s;
  uint64_t n = 0, sum = 0, sum_sq = 0;
  s.erase_min = UINT64_MAX;
  for (const Die& d : dies_) {
    for (const Block& b : d.blocks) {
      s.erase_min = std::min<uint64_t>(s.erase_min, b.erases);
      s.erase_max = std::max<uint64_t>(s.erase_max, b.erases);
      sum += b.erases;
      sum_sq += uint64_t{b.erases} * b.erases;
      ++n;
    }
  }
  s.erase_mean = static_cast<double>(sum) / static_cast<double>(n);
  s.erase_variance = static_cast<double>(sum_sq) / static_cast<double>(n) -
                     s.erase_mean * s.erase_mean;
  return s;
}

absl::Status FlashModel::Verify() const {
  std::vector<uint32_t> valid(dies_.size() * g_.blocks_per_die, 0);
  for (uint64_t lpn = 0; lpn < logical_pages_; ++lpn) {
    const uint32_t ppn = l2p_[lpn];
    if (ppn == kUnmapped) continue;
    if (p2l_[ppn] != lpn) {
      return absl::InternalError(StrCat("flash: logical page ", lpn,
                                        " maps to physical ", ppn,
                                        ", which maps back to ", p2l_[ppn]));
    }
    ++valid[ppn / g_.pages_per_block];
  }
  uint64_t free = 0;
  for (size_t die = 0; die < dies_.size(); ++die) {
    for (uint32_t b = 0; b < g_.blocks_per_die; ++b) {
      const Block& blk = dies_[die].blocks[b];
      if (blk.valid != valid[die * g_.blocks_per_die + b]) {
        return absl::InternalError(StrCat(
            "flash: die ", die, " block ", b, " counts ", blk.valid,
            " valid pages, the map ", valid[die * g_.blocks_per_die + b]));
      }
      if (blk.next_page > g_.pages_per_block) {
        return absl::InternalError(StrCat("flash: die ", die, " block ", b,
                                          " is written past its end"));
      }
      if (blk.state == BlockState::kFree) {
        ++free;
        if (blk.valid != 0) {
          return absl::InternalError(
              StrCat("flash: free block ", b, " of die ", die, " holds data"));
        }
      }
    }
  }
  if (free != free_blocks_) {
    return absl::InternalError(StrCat("flash: ", free, " blocks are free, ",
                                      free_blocks_, " counted"));
  }
  return absl::OkStatus();
}

int FlashModel::DieOf(uint64_t lpn) const {
  const uint32_t ppn = l2p_[lpn];
  if (ppn == kUnmapped) return -1;
  return static_cast<int>(ppn / (g_.blocks_per_die * g_.pages_per_block));
}

uint64_t FlashModel::erase_count(uint32_t die, uint32_t block) const {
  return dies_[die].blocks[block].erases;
}

}  // namespace sroute

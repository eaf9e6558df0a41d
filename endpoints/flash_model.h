// SPDX-License-Identifier: Apache-2.0
// The timing model of an emulated flash device (docs/design.md §8, issue 24):
// channels of dies, dies of blocks, blocks of pages; a page-mapped FTL that
// writes out of place; a pool of free blocks per die and greedy garbage
// collection that holds its die while it copies the victim's valid pages
// and erases it; a DRAM write buffer; an erase count per block (wear).
//
// It keeps no bytes (the flash endpoint keeps them in a real file) and has
// no clock: every call says at which model time (ns) it happens and returns
// when it ends there, so it runs as fast as it is called and tests can
// script it. The endpoint maps model time to wall time (time dilation).
//
//   FlashModel m(FlashModel::Preset("rackblox"));
//   uint64_t acked = m.Write(lpn, now).done_ns;   // buffered: ~15 us
//   uint64_t done = m.Read(lpn, now).done_ns;     // ~80 us, more behind GC
//
// What is modelled, and what is not:
//  - A die does one thing at a time: reads queue behind reads, programs
//    behind programs; a read suspends a program (as firmware does), so it
//    waits for other reads and for GC, and for a program only as long as
//    suspending it takes (suspend_ns; 0: at once), and the program ends
//    later by the read and the suspension: writes slow reads down, reads
//    slow writes down (Sandook §2.3.2; the presets worn, healthy, fast). GC
//    holds the die one step at a time (a page copied, a block erased: host IO
//    waits for the step under way), or for the whole pass (gc_yields false).
//  - Channel buses are not modelled (a page's transfer is in read_ns).
//  - Writes go to the write buffer and are acknowledged there; each page is
//    programmed to the next die in turn, and its buffer slot is free again
//    once programmed. A full buffer makes writes wait for the oldest slot.
//  - GC: with GcMode::kAuto a die collects as soon as its free blocks fall
//    below gc_threshold (a GC-oblivious device). With kSelf the device
//    collects every die at once, on its own, as soon as its free blocks
//    fall below gc_threshold (a vSSD whose FTL collects the whole of it,
//    as RackBlox's do; a coordinator sees one pass). With kCoordinated it
//    collects only when StartGc() says so (the coordinator grants soft or
//    regular requests, or background GC), or when a die has no free block
//    left to write (forced, counted).
//  - A GC pass collects victims (fewest valid pages first) on every die of
//    the model until each die's free blocks reach `target` of its blocks.
//
// Thread-compatible: the caller serializes calls (the endpoint holds a
// mutex); const methods may run together.
#ifndef SROUTE_ENDPOINTS_FLASH_MODEL_H_
#define SROUTE_ENDPOINTS_FLASH_MODEL_H_

#include <cstdint>
#include <queue>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace sroute {

struct FlashGeometry {
  uint32_t channels = 8;
  uint32_t dies_per_channel = 4;
  uint32_t blocks_per_die = 128;
  uint32_t pages_per_block = 256;
  uint32_t page_bytes = 4096;
  // Share of the raw pages kept from the logical space (over-provisioning):
  // what GC has to work with.
  double spare = 0.15;

  uint32_t dies() const { return channels * dies_per_channel; }
  uint64_t raw_pages() const {
    return uint64_t{dies()} * blocks_per_die * pages_per_block;
  }
  uint64_t logical_pages() const {
    return static_cast<uint64_t>(static_cast<double>(raw_pages()) *
                                 (1.0 - spare));
  }
};

struct FlashTiming {
  uint64_t read_ns = 80'000;      // a page to the host, unloaded
  uint64_t program_ns = 800'000;  // about 10x a read
  uint64_t erase_ns = 3'000'000;  // milliseconds
  uint64_t buffer_ns = 15'000;    // a write into (or read from) DRAM
  uint32_t buffer_pages = 1024;   // the write buffer (4 MiB of 4 KiB)
  // A read on a die that programs waits this long for the program to
  // suspend (at most until it ends); the program resumes after the read.
  uint64_t suspend_ns = 0;
};

enum class GcMode { kAuto, kCoordinated, kSelf };

// What a model asks its coordinator for (RackBlox §3.5).
enum class GcNeed { kNone, kSoft, kRegular };
const char* GcNeedName(GcNeed need);

struct FlashOptions {
  FlashGeometry geometry;
  FlashTiming timing;
  GcMode mode = GcMode::kAuto;
  double soft_threshold = 0.35;  // free blocks below: ask for soft GC
  double gc_threshold = 0.25;    // below: GC must run (regular)
  double gc_target = 0.40;       // a GC pass stops at this free share
  // Background GC: the predicted idle gap (EWMA of the gaps between IOs)
  // above which a coordinator may collect without asking.
  // Gaps shorter than idle_min_ns are the load's own rhythm, not idle
  // periods: they do not enter the EWMA, and a device is idle (may start
  // background GC) once no IO came for idle_min_ns.
  // A GC pass yields its die to host IO between its steps (a page copied,
  // a block erased), as devices with preemptible GC do: a read or a
  // program behind GC waits for the step under way (an erase at most, 3
  // ms), and the pass is not made longer for it (host IO fills the gaps
  // GC leaves). false: the pass holds its die whole.
  bool gc_yields = true;
  double idle_alpha = 0.5;
  uint64_t bg_idle_ns = 30'000'000;
  uint64_t idle_min_ns = 1'000'000;
};

// The state a model reports (to its sSwitch, to stats, to a coordinator).
struct FlashState {
  double free_ratio = 1.0;
  bool gc_active = false;    // some die collects at the time asked
  uint64_t gc_until_ns = 0;  // when the last die's GC ends
  uint64_t predicted_idle_ns = 0;
  uint64_t idle_for_ns = 0;  // since the last IO
  // Background GC is worth it now: idle for idle_min_ns, an idle period
  // of bg_idle_ns predicted, and a pass would gain blocks.
  bool bg_ok = false;
  GcNeed need = GcNeed::kNone;
  uint64_t erase_min = 0, erase_max = 0;
  double erase_mean = 0, erase_variance = 0;
  // Counters.
  uint64_t reads = 0, writes = 0, trims = 0;
  uint64_t reads_behind_gc = 0;  // reads that waited for a collecting die
  uint64_t writes_waited = 0;    // writes that found the buffer full
  uint64_t gc_passes = 0, forced_gc = 0;
  uint64_t pages_copied = 0, erases = 0;
};

class FlashModel {
 public:
  // The named presets: "rackblox" (the defaults above: 80 us reads, 15 us
  // buffered writes, 800 us programs, 3 ms erases), "small" (the same
  // timing on 4 dies of 16 blocks of 16 pages, half of them spare, and an
  // 8-page buffer: for tests), and a heterogeneous pool (issue 49) scaled
  // from the profiles Sandook measured (NSDI'26 §2.3.1: 0.28, 0.36 and 0.99
  // MOPS at a 1 ms p90 with 10 % writes), reads and writes interfering
  // through program suspension: "worn", "healthy" and "fast" (their
  // figures: bench/RESULTS.md "Flash presets"). gc_target should lie below the
  // free share the data leaves, or a pass copies much to gain little (it stops
  // after a die's worth of victims).
  static absl::StatusOr<FlashOptions> Preset(const std::string& name);
  // Checks `options` (InvalidArgument naming the field).
  static absl::Status Check(const FlashOptions& options);

  // REQUIRES: Check(options).ok().
  explicit FlashModel(const FlashOptions& options);

  struct Result {
    uint64_t done_ns;  // when it ends
    // A read waited for a collecting die; a write for a full buffer.
    bool delayed;
  };
  // A read of logical page `lpn` issued at `now`. A page never written (or
  // trimmed) reads as zeros from the controller, at buffer speed.
  // REQUIRES: lpn < logical_pages().
  Result Read(uint64_t lpn, uint64_t now);
  // A write of logical page `lpn`, acknowledged once in the write buffer.
  Result Write(uint64_t lpn, uint64_t now);
  // The page's old copy becomes invalid; it reads as zeros.
  void Trim(uint64_t lpn, uint64_t now);

  // Runs a GC pass from `now` on every die (each until its free share
  // reaches gc_target). Returns when the last die is done. A background
  // pass gives `until_ns`, the end of the idle time predicted: a die
  // takes no victim after it, so the pass holds what that time holds
  // (and a read that comes early waits for one victim at most).
  uint64_t StartGc(uint64_t now, uint64_t until_ns = UINT64_MAX);
  // A GC spell from `now` to `until_ns` on every die, whatever the free
  // share: each die erasing block after block, so that host IO waits for
  // the erase under way (gc_yields; for the whole spell without), about
  // Sandook's 20x on a read (its Fig. 2c: seconds of it). Pages are not
  // moved. For benchmarks (a spell at a time chosen). Returns when the
  // last die is done.
  uint64_t HoldForGc(uint64_t now, uint64_t until_ns);
  // The EWMA of the idle gaps between IOs (0 before any gap).
  uint64_t predicted_idle_ns() const {
    return static_cast<uint64_t>(predicted_idle_ns_);
  }
  // Warms the device up as if it had been in use, at no time: each of
  // `lpns` is written, then `overwrites` times as many of them drawn at
  // random (a std::mt19937_64 of `seed`) are written again (the blocks
  // fill with garbage, GC has work), a GC pass runs (as on a device left
  // idle a while), and time is forgotten (ForgetTime).
  // REQUIRES: every lpn < logical_pages().
  void Warm(const std::vector<uint32_t>& lpns, double overwrites,
            uint64_t seed);
  // Forgets time: every die idle, the buffer empty, the counters zero;
  // pages, blocks and wear stay. For a device warmed up (written and
  // over-written at time 0) before it is used.
  void ForgetTime();
  // The same on one die only (tests; a die short of blocks).
  uint64_t CollectDie(uint32_t die, uint64_t now);

  // The state at `now`; with `wear` false the wear fields stay 0 (they
  // take a look at every block: a coordinator's frequent polls skip them).
  FlashState State(uint64_t now, bool wear = true) const;
  GcNeed Need() const;
  double FreeRatio() const;
  bool InGc(uint64_t now) const;

  // Checks the FTL's own accounting (every mapped page maps back, valid
  // counts and free blocks add up): Internal naming the first mismatch.
  // O(pages): for tests.
  absl::Status Verify() const;

  uint64_t logical_pages() const { return logical_pages_; }
  const FlashOptions& options() const { return o_; }
  // The die logical page `lpn` is on now (-1: nowhere yet). For tests.
  int DieOf(uint64_t lpn) const;
  uint64_t erase_count(uint32_t die, uint32_t block) const;

 private:
  static constexpr uint32_t kUnmapped = UINT32_MAX;
  enum class BlockState : uint8_t { kFree, kActive, kFull };
  struct Block {
    uint32_t valid = 0;
    uint32_t next_page = 0;
    uint32_t erases = 0;
    BlockState state = BlockState::kFree;
  };
  struct Die {
    std::vector<Block> blocks;
    std::vector<uint32_t> free_blocks;  // a stack of free block indexes
    int32_t active = -1;                // the block being written
    uint64_t read_free_ns = 0;          // when its last queued read ends
    uint64_t program_free_ns = 0;
    uint64_t gc_until_ns = 0;  // GC holds it until then
    // The ends of the steps (a page copied, a block erased) of the pass
    // under way, in order: with gc_yields, host IO waits for the step
    // under way only.
    std::vector<uint64_t> gc_steps;
    uint64_t gc_from_ns = 0;  // when the first of them began
  };
  // When host IO at `now` may use die `d`: now, or the end of the GC step
  // under way (of the whole pass without gc_yields).
  uint64_t GcFreeAt(const Die& d, uint64_t now) const;

  bool HasRoom(const Die& d) const;
  // Makes a free block `d`'s active one (the one before it is full).
  // REQUIRES: a free block.
  void OpenBlock(Die& d);
  // Where a page goes next: the active block of `die`, opening a free one
  // (and collecting first if none is left). Returns the physical page.
  uint32_t AllocatePage(uint32_t die, uint64_t now);
  // Collects victims on `die` from `start` until its free share reaches
  // gc_target, taking none after `until`; returns when it ends.
  uint64_t CollectLocked(uint32_t die, uint64_t start,
                         uint64_t until = UINT64_MAX);
  void Invalidate(uint32_t ppn);
  uint32_t Ppn(uint32_t die, uint32_t block, uint32_t page) const {
    return (die * g_.blocks_per_die + block) * g_.pages_per_block + page;
  }
  void NoteIo(uint64_t now);

  const FlashOptions o_;
  const FlashGeometry g_;  // o_.geometry, a copy: a copied model stands alone
  const uint64_t logical_pages_;
  std::vector<uint32_t> l2p_;  // logical page -> physical page
  std::vector<uint32_t> p2l_;  // physical page -> logical page (or unmapped)
  // When each logical page's program ends (it is read from DRAM until then).
  std::vector<uint64_t> buffered_until_;
  std::vector<Die> dies_;
  uint64_t free_blocks_ = 0;
  uint32_t next_die_ = 0;
  // Program completions of the pages in the write buffer (a min-heap).
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> buffer_;
  uint64_t last_io_ns_ = 0;
  double predicted_idle_ns_ = 0;
  FlashState counters_;
};

}  // namespace sroute

#endif  // SROUTE_ENDPOINTS_FLASH_MODEL_H_

// SPDX-License-Identifier: Apache-2.0
// Stage kind "cache" (docs/design.md §8): a DRAM block cache on the IO path,
// with a partition per tenant (or per rule, or one), each with a byte
// budget, LRU or S3-FIFO eviction (stages/cache/block_cache.h), and
// write-through (default) or write-back writes. Options: CacheOptions in
// proto/config.proto.
//
//   <*, *, //home/*>       -> <IO, stage:c>
//   <stage:c, *, //home/*> -> <IO, //home/*>
//
// Reads whose blocks are all cached complete here; others go on and fill
// the cache on their response. It never serves stale bytes after a change
// routed by its sSwitch: it observes every byte-changing IO
// (SSwitch::AddChangeObserver), through it or not, and drops what the
// change makes stale, before and after the change, with a per-file
// generation that makes a fill that raced with a change drop itself.
// Changes it cannot observe (another host's writes) are caught at open
// (close-to-open): an open whose reply shows other attributes (inode,
// size, mtime, ctime) than the last open's drops the file's clean blocks.
//
// Write-through writes go on and drop the cached blocks they touch, on
// their way in and again once done (updating the blocks instead would need
// the writes to one block applied here in the backend's order, which
// concurrent writes do not give).
//
// Write-back: writes complete once in the cache as dirty blocks, within
// dirty_limit_bytes (writers wait above it); a flusher thread writes them
// back (new write IOs routed as if stage NAME handed them back, so rules
// for "stage:NAME" route them) between the watermarks, for fsync and Stop
// (details in write_back.cc). fsync and close (Op::kFlush, which the
// front end routes while a write-back stage wants it:
// SSwitch::WantsFlushes) return once the file's dirty blocks are
// acknowledged by the route behind.
//
// Reads of a sequential run longer than sequential_cutoff_bytes go on
// without filling (they would only push out what is read again).
//
// Second tier (tier_dir, tier_bytes; stages/cache/tier.h): clean blocks
// evicted from DRAM go there, and come back on a read that misses in DRAM
// (counted as hits, and in tier_hits); coherence drops them with the DRAM
// blocks.
//
// Live changes (Reconfigure): budgets grow or shrink in place (shrinking
// evicts); a new block_size, partition_by or policy starts from empty
// partitions; leaving write-back, or starting over, writes every dirty
// block back first (and fails, keeping the old options, if one fails); a
// new tier_dir or tier_bytes starts a new, empty tier. Stop() writes every
// dirty block back and returns the first error.
//
// Counters (Report): per partition P (a tenant, a rule id, or "all")
// P.hits, P.misses, P.partial_hits (reads, exactly one each), P.evictions,
// P.bytes, P.dirty_bytes, P.budget_bytes; stage-wide the sums and
// dirty_peak_bytes, bypassed, fills_dropped, flushes, flush_errors,
// writes_waited, read_fills, open_drops, tier_hits, tier_bytes, tier_evictions.
//
// Limits of this version: the state of a file once seen (about 200 bytes)
// stays until the stage stops; the stage must be stopped before its
// sSwitch goes.
//
// Thread safety: thread-safe (one lock per stage, stages/cache/
// cache_impl.h).
#ifndef SROUTE_STAGES_CACHE_CACHE_STAGE_H_
#define SROUTE_STAGES_CACHE_CACHE_STAGE_H_

#include "stages/stage.h"

namespace sroute {

void RegisterCacheStage(StageRegistry& registry);

}  // namespace sroute

#endif  // SROUTE_STAGES_CACHE_CACHE_STAGE_H_

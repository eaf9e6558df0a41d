// Stage kind "cache" (DESIGN.md §8): a DRAM block cache on the IO path,
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
//
// Write-back: writes complete once in the cache as dirty blocks, within
// dirty_limit_bytes (writers wait above it); a flusher thread writes them
// back (behind the stage, as "stage:NAME") between the watermarks, for
// fsync and Stop. No close op reaches the sSwitch (the FUSE front end
// sends none for flush/release), so fsync is what waits for the backend.
#ifndef SROUTE_STAGES_CACHE_CACHE_STAGE_H_
#define SROUTE_STAGES_CACHE_CACHE_STAGE_H_

#include "stages/stage.h"

namespace sroute {

void RegisterCacheStage(StageRegistry& registry);

}  // namespace sroute

#endif  // SROUTE_STAGES_CACHE_CACHE_STAGE_H_

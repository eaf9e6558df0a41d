// SPDX-License-Identifier: Apache-2.0
// Splitting one cache budget across tenants to maximise total hits, given
// each tenant's miss ratio curve (stages/cache/shards.h) and how many
// references it makes: hits(size) = references * (1 - miss_ratio(size)).
//
// AllocateBudget is the greedy on the convex hull used by SHARDS, Talus and
// the sRoute cache controller: take each tenant's lower convex hull of miss
// ratio vs size (the upper concave hull of hits), then repeatedly give the
// hull segment with the most hits per block among the tenants' next
// segments. BruteForceAllocate is the exact optimum, for tests and for the
// benchmarks' "best split offline".
//
// Both are pure functions; sizes are multiples of step_blocks.
#ifndef SROUTE_STAGES_CACHE_ALLOCATE_H_
#define SROUTE_STAGES_CACHE_ALLOCATE_H_

#include <cstdint>
#include <vector>

#include "stages/cache/shards.h"

namespace sroute {

struct TenantCurve {
  MissRatioCurve mrc;
  // References in the period the allocation is for (e.g. the last window's,
  // or mrc.references).
  double references = 0;

  // references * (1 - mrc.MissRatioAt(size_blocks)).
  double Hits(uint64_t size_blocks) const;
};

// Sizes, one per tenant in order, each a multiple of step_blocks (0 is
// taken as 1), summing to at most total_blocks; budget that would add no
// hits to anyone is left unassigned (the caller may spread it).
//
// Optimality. Hull vertices are points of the real curves, so whenever the
// greedy spends the budget on whole segments taken in slope order, its
// split is optimal: it is optimal for the hull relaxation, which bounds
// every split from above. In particular it is exact when every curve is
// convex in miss ratio (hits concave), since then each step is its own
// segment and every segment fits.
//
// Non-convex curves: the greedy can reach a segment longer than the budget
// left, L. The hull relaxation would take L/length of it, so the greedy at
// that moment is short of the optimum by less than that segment's hits, and
// what follows only adds hits:
//   - re-hull: that tenant's hull is recomputed over its curve cut at L
//     (so its next segment fits) and the greedy goes on; it stops when no
//     segment adds hits, so no leftover budget could add any on its own;
//   - seeded reruns: for each tenant that hit such a segment (a cliff), the
//     greedy reruns with that whole segment given first; the split with the
//     most hits wins.
// Not guaranteed optimal: on random non-convex curves (2-4 tenants, up to
// 40 steps) it was optimal in 978 of 1000 cases and never below 0.926 of
// the optimum (tests/unit/stages/shards_test.cc).
//
// Cost, T tenants and K = total_blocks / step_blocks: O(T·K log(T·K)) for
// convex curves; each segment that does not fit costs a re-hull, O(K), and
// the reruns repeat the greedy up to T times, so O(T²·K²) in the worst case.
std::vector<uint64_t> AllocateBudget(const std::vector<TenantCurve>& tenants,
                                     uint64_t total_blocks,
                                     uint64_t step_blocks);

// The exact optimum over all splits into multiples of step_blocks, by dynamic
// programming over tenants and budget (equivalent to trying every split, but
// O(T·K²) rather than exponential in T). Deterministic on ties; like
// AllocateBudget it leaves budget unassigned when no one gains from it.
std::vector<uint64_t> BruteForceAllocate(
    const std::vector<TenantCurve>& tenants, uint64_t total_blocks,
    uint64_t step_blocks);

// The sum of tenants[i].Hits(sizes[i]).
double TotalHits(const std::vector<TenantCurve>& tenants,
                 const std::vector<uint64_t>& sizes);

}  // namespace sroute

#endif  // SROUTE_STAGES_CACHE_ALLOCATE_H_

// SPDX-License-Identifier: Apache-2.0
#include "stages/cache/allocate.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <span>

namespace sroute {
namespace {

// hits[j] = the tenant's hits with j steps, for j up to the last step that
// can change them (the curve is flat past its last point) or k_max.
std::vector<double> HitsBySteps(const TenantCurve& tenant, uint64_t step,
                                uint64_t k_max) {
  const uint64_t curve_steps = (tenant.mrc.max_size_blocks() + step - 1) / step;
  const uint64_t k = std::min(k_max, curve_steps);
  std::vector<double> hits(k + 1);
  for (uint64_t j = 0; j <= k; ++j) hits[j] = tenant.Hits(j * step);
  return hits;
}

// The vertices (in steps) of the upper concave hull of (j, hits[j]). Points
// on a hull edge are kept, so a concave run of steps stays one segment per
// step and the greedy can stop anywhere along it; the tolerance keeps
// rounding noise on such runs from merging steps.
std::vector<uint64_t> UpperHull(std::span<const double> hits) {
  std::vector<uint64_t> hull;
  for (uint64_t c = 0; c < hits.size(); ++c) {
    while (hull.size() >= 2) {
      const uint64_t a = hull[hull.size() - 2];
      const uint64_t b = hull.back();
      // b is below the chord a-c iff (hits[b]-hits[a])/(b-a) <
      // (hits[c]-hits[a])/(c-a).
      const double lhs = (hits[b] - hits[a]) * static_cast<double>(c - a);
      const double rhs = (hits[c] - hits[a]) * static_cast<double>(b - a);
      const double tolerance = 1e-9 * (std::abs(lhs) + std::abs(rhs));
      if (lhs < rhs - tolerance) {
        hull.pop_back();
      } else {
        break;
      }
    }
    hull.push_back(c);
  }
  return hull;
}

// The greedy on the hulls, in steps, over hits[t][0..] (a tenant's hits by
// steps given).
class HullGreedy {
 public:
  HullGreedy(const std::vector<std::vector<double>>& hits, uint64_t budget)
      : hits_(&hits),
        given_(hits.size(), 0),
        hull_(hits.size()),
        next_(hits.size(), 0),
        blocked_at_(hits.size(), 0),
        left_(budget) {}

  // Gives tenant t `steps` before Run(). REQUIRES: steps <= what is left and
  // t's curve reaches it.
  void Seed(size_t t, uint64_t steps) {
    given_[t] += steps;
    left_ -= steps;
  }

  // Takes whole hull segments, the most hits per step first (the lowest
  // tenant on ties, so the result is deterministic), while any adds hits.
  // A segment that does not fit the budget left is replaced by the hull of
  // the tenant's curve cut at what is left (whose first segment fits), so
  // the budget ends up spent on real curve points.
  void Run() {
    std::priority_queue<std::pair<double, int64_t>> heap;
    auto push_next = [&](size_t t) {
      if (next_[t] + 1 >= hull_[t].size()) return;
      const double slope =
          SegmentHits(t) / static_cast<double>(SegmentSteps(t));
      if (slope > 0) heap.emplace(slope, -static_cast<int64_t>(t));
    };
    for (size_t t = 0; t < given_.size(); ++t) {
      Rehull(t);
      push_next(t);
    }
    while (!heap.empty()) {
      const size_t t = static_cast<size_t>(-heap.top().second);
      heap.pop();
      if (SegmentSteps(t) > left_) {
        if (blocked_at_[t] == 0) blocked_at_[t] = hull_[t][next_[t] + 1];
        Rehull(t);
      } else {
        left_ -= SegmentSteps(t);
        given_[t] = hull_[t][++next_[t]];
      }
      push_next(t);
    }
  }

  // For each tenant, the end (in steps) of the first hull segment that did
  // not fit, or 0.
  const std::vector<uint64_t>& blocked_at() const { return blocked_at_; }
  const std::vector<uint64_t>& given() const { return given_; }
  double Hits() const {
    double total = 0;
    for (size_t t = 0; t < given_.size(); ++t) total += (*hits_)[t][given_[t]];
    return total;
  }

 private:
  // hull_[t] := the vertices of the upper hull of t's points from given_[t]
  // to given_[t] + left_.
  void Rehull(size_t t) {
    const std::vector<double>& hits = (*hits_)[t];
    const uint64_t from = given_[t];
    const uint64_t to = std::min<uint64_t>(hits.size() - 1, from + left_);
    hull_[t] =
        UpperHull(std::span<const double>(hits).subspan(from, to - from + 1));
    for (uint64_t& v : hull_[t]) v += from;
    next_[t] = 0;
  }
  // t's next segment (REQUIRES: one exists).
  uint64_t SegmentSteps(size_t t) const {
    return hull_[t][next_[t] + 1] - hull_[t][next_[t]];
  }
  double SegmentHits(size_t t) const {
    const std::vector<double>& h = (*hits_)[t];
    return h[hull_[t][next_[t] + 1]] - h[hull_[t][next_[t]]];
  }

  const std::vector<std::vector<double>>* hits_;
  std::vector<uint64_t> given_;
  std::vector<std::vector<uint64_t>> hull_;  // absolute steps
  std::vector<size_t> next_;                 // given_[t] == hull_[t][next_[t]]
  std::vector<uint64_t> blocked_at_;
  uint64_t left_;
};

}  // namespace

double TenantCurve::Hits(uint64_t size_blocks) const {
  return references * (1.0 - mrc.MissRatioAt(size_blocks));
}

double TotalHits(const std::vector<TenantCurve>& tenants,
                 const std::vector<uint64_t>& sizes) {
  double total = 0;
  for (size_t i = 0; i < tenants.size() && i < sizes.size(); ++i) {
    total += tenants[i].Hits(sizes[i]);
  }
  return total;
}

std::vector<uint64_t> AllocateBudget(const std::vector<TenantCurve>& tenants,
                                     uint64_t total_blocks,
                                     uint64_t step_blocks) {
  const uint64_t step = std::max<uint64_t>(step_blocks, 1);
  const uint64_t k_max = total_blocks / step;
  const size_t n = tenants.size();
  std::vector<std::vector<double>> hits(n);
  for (size_t t = 0; t < n; ++t) {
    hits[t] = HitsBySteps(tenants[t], step, k_max);
  }

  HullGreedy greedy(hits, k_max);
  greedy.Run();
  std::vector<uint64_t> best = greedy.given();
  double best_hits = greedy.Hits();
  // Seeded reruns: the first segment that did not fit a tenant (a cliff in
  // its curve) may be worth more than the cheaper segments taken before
  // it. For each such tenant, give it that segment first and rerun; keep
  // whichever split has the most hits.
  const std::vector<uint64_t> blocked_at = greedy.blocked_at();
  for (size_t u = 0; u < blocked_at.size(); ++u) {
    if (blocked_at[u] == 0) continue;
    HullGreedy seeded(hits, k_max);
    seeded.Seed(u, blocked_at[u]);
    seeded.Run();
    if (seeded.Hits() > best_hits) {
      best_hits = seeded.Hits();
      best = seeded.given();
    }
  }

  std::vector<uint64_t> sizes(n);
  for (size_t t = 0; t < n; ++t) sizes[t] = best[t] * step;
  return sizes;
}

std::vector<uint64_t> BruteForceAllocate(
    const std::vector<TenantCurve>& tenants, uint64_t total_blocks,
    uint64_t step_blocks) {
  const uint64_t step = std::max<uint64_t>(step_blocks, 1);
  const uint64_t k_max = total_blocks / step;
  const size_t n = tenants.size();
  // best[j]: the most hits of the tenants so far with at most j steps;
  // choice[t][j]: tenant t's steps in that split.
  std::vector<double> best(k_max + 1, 0.0);
  std::vector<std::vector<uint64_t>> choice(n,
                                            std::vector<uint64_t>(k_max + 1));
  for (size_t t = 0; t < n; ++t) {
    const std::vector<double> hits = HitsBySteps(tenants[t], step, k_max);
    std::vector<double> next(k_max + 1);
    for (uint64_t j = 0; j <= k_max; ++j) {
      // x past the curve's end adds nothing; the smallest x wins ties.
      const uint64_t x_max = std::min<uint64_t>(j, hits.size() - 1);
      double v = -1;
      uint64_t arg = 0;
      for (uint64_t x = 0; x <= x_max; ++x) {
        const double candidate = best[j - x] + hits[x];
        if (candidate > v) {
          v = candidate;
          arg = x;
        }
      }
      next[j] = v;
      choice[t][j] = arg;
    }
    best = std::move(next);
  }
  std::vector<uint64_t> sizes(n);
  uint64_t j = k_max;
  for (size_t t = n; t-- > 0;) {
    sizes[t] = choice[t][j] * step;
    j -= choice[t][j];
  }
  return sizes;
}

}  // namespace sroute

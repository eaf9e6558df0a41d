// SPDX-License-Identifier: Apache-2.0
// The q-quantile of values already sorted (the value below which a share q
// of them lie, by rank: sorted[q * n], the last for q = 1).
//
//   std::sort(us.begin(), us.end());
//   double p99 = QuantileOfSorted(us, 0.99);
//   double p50 = Quantile(unsorted, 0.5);  // without sorting them all
//
// Thread safety: a plain function of its arguments.
#ifndef SROUTE_UTIL_QUANTILE_H_
#define SROUTE_UTIL_QUANTILE_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace sroute {

// The q-quantile of values in any order (a copy is partly sorted; the
// caller's values are left as they were).
// 0 for no values.
inline double Quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  const size_t i =
      std::min(values.size() - 1,
               static_cast<size_t>(q * static_cast<double>(values.size())));
  std::nth_element(values.begin(), values.begin() + static_cast<long>(i),
                   values.end());
  return values[i];
}

// 0 for no values.
inline double QuantileOfSorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::min(
      sorted.size() - 1,
      static_cast<size_t>(q * static_cast<double>(sorted.size())))];
}

}  // namespace sroute

#endif  // SROUTE_UTIL_QUANTILE_H_

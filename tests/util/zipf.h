// SPDX-License-Identifier: Apache-2.0
// Zipf: draws item indices 0..n-1 with P(i) proportional to 1/(i+1)^s, by
// inverse CDF (O(log n) a draw). For cache tests and benchmarks.
#ifndef SROUTE_TESTS_UTIL_ZIPF_H_
#define SROUTE_TESTS_UTIL_ZIPF_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace sroute::testing {

class Zipf {
 public:
  Zipf(size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += 1.0 / std::pow(i + 1, s);
    double acc = 0;
    for (size_t i = 0; i < n; ++i) {
      acc += 1.0 / std::pow(i + 1, s) / sum;
      cdf_[i] = acc;
    }
  }
  size_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const size_t i =
        std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin();
    return std::min(i, cdf_.size() - 1);  // rounding at the top
  }

 private:
  std::vector<double> cdf_;
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_ZIPF_H_

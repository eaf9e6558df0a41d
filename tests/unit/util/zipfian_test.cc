// SPDX-License-Identifier: Apache-2.0
#include "util/zipfian.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace sroute {
namespace {

// Uniform draws reach every key (a hash folded modulo n reached 63 %).
TEST(ZipfianTest, UniformKeysCoverTheWholeRange) {
  for (uint64_t n : {1ull, 7ull, 1000ull, 1024ull}) {
    const Zipfian z(n, 0);
    std::mt19937_64 rng(1);
    std::vector<int> seen(n, 0);
    for (uint64_t i = 0; i < 50 * n; ++i) {
      const uint64_t k = z.Key(rng);
      ASSERT_LT(k, n);
      ++seen[k];
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), 0) << "n=" << n;
  }
}

// Skewed draws: every rank has its own key, the hottest drawn most, and
// the first ranks' keys are not neighbours.
TEST(ZipfianTest, SkewedRanksMapToDistinctScatteredKeys) {
  const uint64_t n = 4096;
  const Zipfian z(n, 0.99);
  std::mt19937_64 rng(2);
  std::vector<int> seen(n, 0);
  for (int i = 0; i < 200000; ++i) ++seen[z.Key(rng)];
  const auto hottest = std::max_element(seen.begin(), seen.end());
  EXPECT_GT(*hottest, 200000 / 20);  // rank 0 of zipf(0.99) over 4 Ki: ~11 %
  int second = 0;
  for (int c : seen) {
    if (c != *hottest) second = std::max(second, c);
  }
  const long hot_key = hottest - seen.begin();
  const long second_key =
      std::find(seen.begin(), seen.end(), second) - seen.begin();
  EXPECT_GT(std::abs(hot_key - second_key), 1);
}

}  // namespace
}  // namespace sroute

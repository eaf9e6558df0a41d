// SPDX-License-Identifier: Apache-2.0
// YCSB's zipfian generator (Gray et al.) over [0, n), the rank scattered
// one to one by a prime stride so that hot keys are not neighbours; theta
// 0 draws uniformly. For the benchmark programs (gc_ycsb, steer_policies)
// and sroute-sim.
//
//   const Zipfian zipf(pages, 0.99);
//   uint64_t page = zipf.Key(rng);
//
// Immutable after construction: thread-safe (each caller its own rng).
#ifndef SROUTE_UTIL_ZIPFIAN_H_
#define SROUTE_UTIL_ZIPFIAN_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

namespace sroute {

class Zipfian {
 public:
  explicit Zipfian(uint64_t n, double theta = 0.99) : n_(n), theta_(theta) {
    if (theta == 0) return;
    for (uint64_t i = 1; i <= n; ++i) zetan_ += 1.0 / std::pow(i, theta);
    const double zeta2 = 1.0 + 1.0 / std::pow(2.0, theta);
    alpha_ = 1.0 / (1.0 - theta);
    eta_ = (1.0 - std::pow(2.0 / static_cast<double>(n), 1.0 - theta)) /
           (1.0 - zeta2 / zetan_);
  }
  // The rank (0 hottest); uniform with theta 0.
  uint64_t Rank(std::mt19937_64& rng) const {
    if (theta_ == 0) return rng() % n_;
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    const double uz = u * zetan_;
    if (uz < 1.0) return 0;
    if (uz < 1.0 + std::pow(0.5, theta_)) return 1;
    return std::min<uint64_t>(
        n_ - 1, static_cast<uint64_t>(static_cast<double>(n_) *
                                      std::pow(eta_ * u - eta_ + 1.0, alpha_)));
  }
  // A key: the rank scattered over [0, n) one to one (every key drawn as
  // often as its rank: a hash taken modulo n would fold a third of the keys
  // onto others and leave them never drawn).
  uint64_t Key(std::mt19937_64& rng) const {
    return static_cast<uint64_t>(
        (static_cast<unsigned __int128>(Rank(rng)) * Stride() + n_ / 3) % n_);
  }

 private:
  // A prime that does not divide n: i * Stride() mod n is a permutation,
  // which puts neighbouring ranks far apart.
  uint64_t Stride() const {
    return n_ % 4294967291ull != 0 ? 4294967291ull : 4294967279ull;
  }

  const uint64_t n_;
  const double theta_;
  double zetan_ = 0, alpha_ = 0, eta_ = 0;
};

}  // namespace sroute

#endif  // SROUTE_UTIL_ZIPFIAN_H_

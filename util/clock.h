// SPDX-License-Identifier: Apache-2.0
// The one monotonic clock of sroute: nanoseconds of CLOCK_MONOTONIC (what
// std::chrono::steady_clock reads on Linux), for latencies, deadlines and
// caches' time-outs. Thread-safe; a vDSO call, no system call.
#ifndef SROUTE_UTIL_CLOCK_H_
#define SROUTE_UTIL_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace sroute {

inline uint64_t MonotonicNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u +
         static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace sroute

#endif  // SROUTE_UTIL_CLOCK_H_

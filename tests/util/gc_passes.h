// SPDX-License-Identifier: Apache-2.0
// Whether two members' GC passes (GcEvent) overlapped, for the tests of GC
// coordination: a pass's end is the device's prediction, and a later answer
// may move it by up to the stage's jitter (500 us) after the next pass was
// granted on the earlier one, so overlaps that small do not count.
#ifndef SROUTE_TESTS_UTIL_GC_PASSES_H_
#define SROUTE_TESTS_UTIL_GC_PASSES_H_

#include <algorithm>
#include <cstdint>

#include "proto/hostctl.pb.h"

namespace sroute::testing {

inline bool PassesOverlap(const proto::GcEvent& a, const proto::GcEvent& b) {
  constexpr int64_t kStageJitterUs = 500;
  const int64_t shared =
      std::min<int64_t>(static_cast<int64_t>(a.end_unix_us()),
                        static_cast<int64_t>(b.end_unix_us())) -
      std::max<int64_t>(static_cast<int64_t>(a.start_unix_us()),
                        static_cast<int64_t>(b.start_unix_us()));
  return shared > kStageJitterUs;
}

// Overlapping is allowed when one of them had to collect (out of space).
inline bool HadToCollect(const proto::GcEvent& a, const proto::GcEvent& b) {
  return a.kind() == "regular" || a.kind() == "device" ||
         b.kind() == "regular" || b.kind() == "device";
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_GC_PASSES_H_

// SPDX-License-Identifier: Apache-2.0
// A flash model's load-latency profile in model time (issue 49): the same
// sweep `sroutectl profile` runs through a route (a closed loop for each
// mix's peak, then open-loop Poisson steps up to it), run on a FlashModel
// directly, so it takes milliseconds and is the same on every machine. It
// calibrates the presets, and gives the steering benchmarks their ideal.
//
//   ModelSweep sweep;                    // 9 mixes, steps of 1 % of peak
//   proto::DeviceProfile p = ProfileModel(*FlashModel::Preset("fast"), sweep);
//
// Thread-compatible (each call builds its own model).
#ifndef SROUTE_ENDPOINTS_FLASH_PROFILE_H_
#define SROUTE_ENDPOINTS_FLASH_PROFILE_H_

#include <cstdint>
#include <vector>

#include "endpoints/flash_model.h"
#include "proto/config.pb.h"

namespace sroute {

struct ModelSweep {
  std::vector<uint32_t> write_percents = {0, 10, 20, 25, 30, 50, 70, 75, 100};
  uint32_t step_percent = 1;  // of the mix's peak, up to 100 %
  uint32_t ios_per_step = 4000;
  uint32_t depth = 64;  // the closed loop that finds a mix's peak
  // Share of the logical pages written before the sweep (reads find data,
  // writes overwrite it and GC has work).
  double fill = 0.5;
  uint64_t seed = 1;
};

// REQUIRES: FlashModel::Check(options).ok(); write_percents ascending
// within 0..100; step_percent in 1..100.
proto::DeviceProfile ProfileModel(const FlashOptions& options,
                                  const ModelSweep& sweep);

// `profile` as a device run `dilation` times slower serves it (a flash
// endpoint's dilation=N): latencies times N, rates divided by N. The
// software on the way (the endpoint, a server) is not in it: a profile
// measured through the route says what that adds.
// REQUIRES: dilation >= 1.
proto::DeviceProfile DilateProfile(proto::DeviceProfile profile,
                                   double dilation);

}  // namespace sroute

#endif  // SROUTE_ENDPOINTS_FLASH_PROFILE_H_

// SPDX-License-Identifier: Apache-2.0
// Device profiles for tests of steering (stages/steering/profile.h).
#ifndef SROUTE_TESTS_UTIL_PROFILES_H_
#define SROUTE_TESTS_UTIL_PROFILES_H_

#include <string>

#include "proto/config.pb.h"

namespace sroute::testing {

// A profile no device meets (10 ns at any load and mix, so even the calm
// ratio a watch learns, at most 3x, leaves every IO far over it): a
// congestion watch with it judges every window congested.
inline proto::DeviceProfile UnmeetableProfile(const std::string& endpoint) {
  proto::DeviceProfile p;
  p.set_endpoint(endpoint);
  auto* mix = p.add_mix();
  mix->set_write_percent(100);
  auto* pt = mix->add_point();
  pt->set_iops(1e6);
  pt->set_p50_us(0.01);
  pt->set_p90_us(0.01);
  pt->set_p99_us(0.01);
  return p;
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_PROFILES_H_

// SPDX-License-Identifier: Apache-2.0
// The kernel's system-wide switch for FUSE over io_uring, for tests that
// need it on. Tests turn it on as installing sroute does, and never off:
// volumes mount with --io-uring=auto by default, and a test's volume should
// not take one transport or the other by the timing of other tests running
// in parallel. A test that needs the switch off sees it off in a mount
// namespace of its own (SwitchOffCommand).
#ifndef SROUTE_TESTS_UTIL_URING_SWITCH_H_
#define SROUTE_TESTS_UTIL_URING_SWITCH_H_

#include <fstream>
#include <string>

namespace sroute::testing {

inline constexpr const char* kUringSwitchPath =
    "/sys/module/fuse/parameters/enable_uring";

// Turns the switch on; false if this kernel has no FUSE over io_uring (or
// the switch could not be set).
inline bool UringSwitchOn() {
  {
    std::ifstream in(kUringSwitchPath);
    std::string value;
    if (!(in >> value)) return false;
    if (value == "Y") return true;
  }
  std::ofstream out(kUringSwitchPath);
  out << "Y\n";
  out.close();
  return !out.fail();
}

// `command` run by sh in a mount namespace of its own where the switch
// reads N (a file bound over it); `scratch` is a directory for that file.
inline std::string SwitchOffCommand(const std::string& scratch,
                                    const std::string& command) {
  return "echo N > " + scratch + "/switch-off && unshare -m sh -c 'mount " +
         "--bind " + scratch + "/switch-off " + kUringSwitchPath + " && " +
         command + "'";
}

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_URING_SWITCH_H_

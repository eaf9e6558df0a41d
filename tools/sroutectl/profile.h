// SPDX-License-Identifier: Apache-2.0
// sroutectl profile: devices' load-latency profiles (issue 49) and the
// congestion watch hosts keep with them. `measure` runs a sweep on a host
// (calls of stages/steering/sweep.h until it is done, its progress on
// stderr); `model` computes an emulated flash preset's offline
// (endpoints/flash_profile.h); `set`, `clear` and `ls` act on the
// host's watches. Profiles are saved and read as protobuf text
// (DeviceProfile).
#ifndef SROUTE_TOOLS_SROUTECTL_PROFILE_H_
#define SROUTE_TOOLS_SROUTECTL_PROFILE_H_

#include <string>

#include "tools/sroutectl/commands.h"
#include "tools/sroutectl/target.h"

namespace sroute::ctl {

// A profile for people: where and how it was measured, then per mix its
// peak and the load it serves within a few p90 targets.
std::string ProfileText(const proto::DeviceProfile& profile);

int ProfileMeasure(const Args& args, ControlTarget& target);
int ProfileOfModel(const Args& args);
int ProfileSet(const Args& args, ControlTarget& target);
int ProfileClear(const Args& args, ControlTarget& target);
int ProfileList(const Args& args, ControlTarget& target);
int ProfileStore(const Args& args, ControlTarget& target);

}  // namespace sroute::ctl

#endif  // SROUTE_TOOLS_SROUTECTL_PROFILE_H_

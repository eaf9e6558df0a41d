// SPDX-License-Identifier: Apache-2.0
// sroute-fuse's own part of start-up: its flags beyond every host's
// (host/flags.h) and running a volume from a resolved HostConfig: the host
// (host/runtime.h), the FUSE session and its loop, and the orderly stop.
#ifndef SROUTE_FUSE_RUN_VOLUME_H_
#define SROUTE_FUSE_RUN_VOLUME_H_

#include <string>

#include "CLI/CLI.hpp"
#include "proto/config.pb.h"

namespace sroute {

struct MountRequest {
  std::string mountpoint;
  bool foreground = false;
  bool debug = false;   // print every FUSE request (implies foreground)
  std::string options;  // -o, comma-separated
};

// Adds MOUNTPOINT, --backing, --tenant, --kernel-cache, --threads, --nice,
// --io-uring, -f, -d and -o: the mount's into `mount`, the rest into
// `overlay`.
void AddVolumeFlags(CLI::App* app, proto::HostConfig* overlay,
                    MountRequest* mount);

// Mounts and serves until unmounted or stopped by a signal (BlockStopSignals
// first, in main); without foreground, detaches once the volume serves.
// Returns the process's exit status; errors are printed.
int RunVolume(proto::HostConfig config, const MountRequest& mount);

}  // namespace sroute

#endif  // SROUTE_FUSE_RUN_VOLUME_H_

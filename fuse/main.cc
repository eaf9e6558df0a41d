// SPDX-License-Identifier: Apache-2.0
// sroute-fuse MOUNTPOINT --backing DIR|HOST:PORT [--config FILE]
//             [--endpoint NAME=DIR|NAME=HOST:PORT]... [--secret-file FILE]
//             [--rules FILE] [--rule RULE]... [--tenant NAME=WHO]...
//             [--kernel-cache off|auto] [--control SOCKET] [--name NAME]
//             [--controller HOST:PORT] [--threads N] [--poll-us N]
//             [--nice N] [--io-uring[=auto|on|off]] [--passthrough auto|off]
//             [-f] [-d] [-o OPTIONS]
//
// Mounts a routed volume: the namespace lives in the backing directory or
// storage server (endpoint "home"); rules may send any IO elsewhere.
#include <csignal>
#include <iostream>

#include "CLI/CLI.hpp"
#include "fuse/run_volume.h"
#include "fuse/session_loop.h"
#include "host/flags.h"

int main(int argc, char** argv) {
  // Before any thread starts, so that every thread inherits the mask. (Stop
  // signals are taken by the session loop, not by libfuse's handlers.)
  sroute::BlockStopSignals();
  signal(SIGPIPE, SIG_IGN);  // a closed socket is an error, not an exit
  CLI::App app{"sroute-fuse: a FUSE volume whose IO is routed by rules"};
  app.set_version_flag("--version",
                       std::string("sroute-fuse ") + SROUTE_VERSION);
  sroute::HostFlags host_flags(&app, sroute::HostKind::kFuse);
  sroute::MountRequest mount;
  sroute::AddVolumeFlags(&app, &host_flags.overlay(), &mount);
  CLI11_PARSE(app, argc, argv);
  auto config = host_flags.Resolve();
  if (!config.ok()) {
    std::cerr << "sroute-fuse: " << config.status().message() << "\n";
    return 1;
  }
  return sroute::RunVolume(*std::move(config), mount);
}

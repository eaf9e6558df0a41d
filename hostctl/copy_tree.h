// SPDX-License-Identifier: Apache-2.0
// Copying a host's data between its own endpoints (proto/hostctl.proto
// Copy): the wear-levelling app's swap of two vSSDs' data
// (controller/apps/wear_level.h) runs on the host that has both, in steps
// the controller drives (a budget per call, a resume point).
//
// The order is fixed: depth first, the names of each folder sorted, a
// folder before what is in it. `after` names the last entry an earlier call
// finished (relative to `from`), so a call goes on with the entries after it
// in that order; a file is always finished by the call that began it.
// Nothing of the copy is kept on the host between calls.
//
// What is copied: folders, regular files (bytes, size), symbolic links,
// and the mode, owner and times of each. Not: extended attributes, device
// nodes, hard links (each name is its own file at `to`).
#ifndef SROUTE_HOSTCTL_COPY_TREE_H_
#define SROUTE_HOSTCTL_COPY_TREE_H_

#include "absl/status/status.h"
#include "proto/hostctl.pb.h"
#include "sswitch/sswitch.h"

namespace sroute {

// Serves one Copy request; fills *progress (its counters are this call's).
// Errors name the file and the IO that failed.
// REQUIRES: a thread that may block (each IO is waited for).
absl::Status CopyTree(SSwitch& sw, const proto::Copy& request,
                      proto::CopyProgress* progress);

}  // namespace sroute

#endif  // SROUTE_HOSTCTL_COPY_TREE_H_

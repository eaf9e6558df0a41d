// SPDX-License-Identifier: Apache-2.0
// The names of a flash endpoint's control xattrs, for the endpoint
// (endpoints/flash_endpoint.h) and for those that steer it without
// knowing it (the replica set's GC coordination, stages/replica_set/gc.cc).
#ifndef SROUTE_ENDPOINTS_FLASH_XATTRS_H_
#define SROUTE_ENDPOINTS_FLASH_XATTRS_H_

namespace sroute {

// A flash endpoint's control, through xattrs of any of its names (so that
// it reaches a device wherever the rules place it, on this host or behind
// a server), for the sSwitch's own IOs only (an IO with a caller, a user's,
// gets EPERM):
//  - getxattr kFlashStateXattr: the state, "key=value" words:
//    free_permille, need (none|soft|regular), gc (0|1), gc_left_us (wall
//    time until the GC under way ends), idle_us (the predicted idle gap,
//    wall time), mode (auto|self|coordinated), passes (GC passes so far);
//  - setxattr kFlashGcXattr with value soft|regular|bg: a coordinator
//    grants a GC pass (counted by kind), which starts now; a bg pass
//    takes no victim after the idle time the device predicts.
// A directory that is not a flash device answers both with an error
// (EOPNOTSUPP, or ENODATA): it is not one.
inline constexpr char kFlashStateXattr[] = "sroute.flash.state";
inline constexpr char kFlashGcXattr[] = "sroute.flash.gc";

}  // namespace sroute

#endif  // SROUTE_ENDPOINTS_FLASH_XATTRS_H_

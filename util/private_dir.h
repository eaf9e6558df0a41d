// SPDX-License-Identifier: Apache-2.0
// MakePrivateDirectories: the state directories of the daemons (RocksDB
// stores: rules, topology, file names) are made readable by their owner
// only, whatever the umask; directories that exist keep the mode their
// administrator gave them.
//
//   if (auto s = MakePrivateDirectories(dir); !s.ok()) return s;
//
// Thread safety: thread-safe (it only makes system calls).
#ifndef SROUTE_UTIL_PRIVATE_DIR_H_
#define SROUTE_UTIL_PRIVATE_DIR_H_

#include <string>

#include "absl/status/status.h"

namespace sroute {

// Makes `dir` and its missing ancestors, each it makes with mode 0700.
// An error names the directory that could not be made.
absl::Status MakePrivateDirectories(const std::string& dir);

}  // namespace sroute

#endif  // SROUTE_UTIL_PRIVATE_DIR_H_

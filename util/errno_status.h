// SPDX-License-Identifier: Apache-2.0
// errno <-> absl::Status at the syscall and FUSE edges. The errno travels as
// a payload so the FUSE front end can reply with exactly the errno a syscall
// gave (canonical codes alone would merge ENOTEMPTY and EEXIST, say).
#ifndef SROUTE_UTIL_ERRNO_STATUS_H_
#define SROUTE_UTIL_ERRNO_STATUS_H_

#include <string_view>

#include "absl/status/status.h"

namespace sroute {

// The description of errno `err`. Thread-safe, unlike std::strerror (and
// absl's StrError, which TSan reports racing in Debian's build).
const char* ErrnoText(int err);

// A status for errno `err`, with message "CONTEXT: ErrnoText(err)".
absl::Status ErrnoStatus(int err, std::string_view context);

// A status with `code` and `message` that carries errno `err` (when > 0),
// e.g. to rebuild an error received from another host.
absl::Status StatusWithErrno(absl::StatusCode code, std::string_view message,
                             int err);

// The errno to report for `s`: its errno payload, or one derived from its
// code (0 for OK).
int ErrnoOf(const absl::Status& s);

// A copy of `s` (code, message, payloads) that shares no memory with it,
// for a status handed to another thread: absl counts a status's
// references partly in Debian's libabsl, which is not built with TSan, so
// the last release of a shared one looks like a race to TSan.
absl::Status UnsharedStatus(const absl::Status& s);

}  // namespace sroute

#endif  // SROUTE_UTIL_ERRNO_STATUS_H_

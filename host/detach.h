// SPDX-License-Identifier: Apache-2.0
// Detaching a daemon from its terminal, with its start-up reported to the
// command that started it:
//
//   parent ── fork ──> child: setsid; builds the host, mounts, ...
//     │                  ├─ Ready(): chdir "/", stdio to /dev/null, one byte
//     │                  │           down the pipe ──> parent exits 0
//     │                  └─ exits (an error on stderr, still the terminal's)
//     └─ no byte: exits with the child's status
//
// The daemon forks before it builds anything, so no thread has to survive a
// fork and every part starts once; a start-up error reaches the terminal and
// the exit status, as it does in the foreground.
#ifndef SROUTE_HOST_DETACH_H_
#define SROUTE_HOST_DETACH_H_

#include "absl/status/status.h"

namespace sroute {

class Detacher {
 public:
  // Forks; only the child returns (the parent exits as drawn above).
  // REQUIRES: no thread has been started yet.
  absl::Status Detach();
  // In the child: started, now a daemon. A no-op unless Detach returned.
  void Ready();

 private:
  int ready_fd_ = -1;
};

}  // namespace sroute

#endif  // SROUTE_HOST_DETACH_H_

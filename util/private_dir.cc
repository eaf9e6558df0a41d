// SPDX-License-Identifier: Apache-2.0
#include "util/private_dir.h"

#include <errno.h>
#include <sys/stat.h>

#include "util/errno_status.h"

namespace sroute {

absl::Status MakePrivateDirectories(const std::string& dir) {
  for (size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string prefix =
        end == std::string::npos ? dir : dir.substr(0, end);
    if (!prefix.empty() && mkdir(prefix.c_str(), 0700) != 0 &&
        errno != EEXIST) {
      return ErrnoStatus(errno, "cannot make the directory " + prefix);
    }
    if (end == std::string::npos) break;
  }
  // mkdir's mode passed through the umask, which may hold back the owner's
  // bits only; a directory made just now is the owner's alone either way.
  return absl::OkStatus();
}

}  // namespace sroute

#include "tools/sroutectl/target.h"

#include <string>

namespace sroute::ctl {

absl::Status NotReached(const absl::Status& s) {
  return absl::UnavailableError(std::string(s.message()));
}

absl::Status Refused(const absl::Status& s) {
  // Aborted: the call was made and did not complete.
  return absl::IsUnavailable(s) ? absl::AbortedError(std::string(s.message()))
                                : s;
}

}  // namespace sroute::ctl

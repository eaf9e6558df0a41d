// SPDX-License-Identifier: Apache-2.0
#include "util/errno_status.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/cord.h"
#include "util/strings.h"

namespace sroute {
namespace {
constexpr char kErrnoPayload[] = "sroute/errno";
}  // namespace

const char* ErrnoText(int err) {
  const char* text = ::strerrordesc_np(err);
  return text != nullptr ? text : "Unknown error";
}

absl::Status ErrnoStatus(int err, std::string_view context) {
  absl::Status s(absl::ErrnoToStatusCode(err),
                 StrCat(context, context.empty() ? "" : ": ", ErrnoText(err)));
  s.SetPayload(kErrnoPayload, absl::Cord(std::to_string(err)));
  return s;
}

absl::Status StatusWithErrno(absl::StatusCode code, std::string_view message,
                             int err) {
  absl::Status s(code, absl::string_view(message.data(), message.size()));
  if (err > 0 && !s.ok()) {
    s.SetPayload(kErrnoPayload, absl::Cord(std::to_string(err)));
  }
  return s;
}

absl::Status UnsharedStatus(const absl::Status& s) {
  if (s.ok()) return absl::OkStatus();
  absl::Status copy(s.code(), std::string(s.message()));
  s.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) {
    copy.SetPayload(url, absl::Cord(std::string(payload)));
  });
  return copy;
}

int ErrnoOf(const absl::Status& s) {
  if (s.ok()) return 0;
  if (auto p = s.GetPayload(kErrnoPayload)) {
    int v = std::atoi(std::string(*p).c_str());
    if (v > 0) return v;
  }
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
      return EINVAL;
    case absl::StatusCode::kNotFound:
      return ENOENT;
    case absl::StatusCode::kAlreadyExists:
      return EEXIST;
    case absl::StatusCode::kPermissionDenied:
      return EACCES;
    case absl::StatusCode::kResourceExhausted:
      return ENOSPC;
    case absl::StatusCode::kDeadlineExceeded:
      return ETIMEDOUT;
    case absl::StatusCode::kUnavailable:
      return EIO;
    case absl::StatusCode::kUnimplemented:
      return ENOSYS;
    case absl::StatusCode::kOutOfRange:
      return EFBIG;
    case absl::StatusCode::kFailedPrecondition:
      return EPERM;
    case absl::StatusCode::kAborted:
      return EAGAIN;
    default:
      return EIO;
  }
}

}  // namespace sroute

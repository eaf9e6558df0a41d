// SPDX-License-Identifier: Apache-2.0
// ControlClient: talks to a ControlServer over its unix socket. Every call
// has a deadline, so a dead or stuck server gives an error, not a hang.
//
// Thread safety: not thread-safe (one request at a time).
#ifndef SROUTE_HOSTCTL_CONTROL_CLIENT_H_
#define SROUTE_HOSTCTL_CONTROL_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/hostctl.pb.h"

namespace sroute {

class ControlClient {
 public:
  // Unavailable (naming the path) when nothing accepts there.
  static absl::StatusOr<std::unique_ptr<ControlClient>> Connect(
      const std::string& socket_path);
  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Sends `request` (stamping the protocol version and a request id) and
  // waits for the response. The transport's errors come back as the status
  // (DeadlineExceeded after `timeout`); the host's answer, error or not, as
  // the response (see code and message).
  absl::StatusOr<proto::ControlResponse> Call(
      const proto::ControlRequest& request, absl::Duration timeout);

 private:
  ControlClient(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  const std::string path_;
  uint64_t next_id_ = 1;
};

}  // namespace sroute

#endif  // SROUTE_HOSTCTL_CONTROL_CLIENT_H_

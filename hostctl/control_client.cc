// SPDX-License-Identifier: Apache-2.0
#include "hostctl/control_client.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "hostctl/control_server.h"
#include "proto/rpc.pb.h"
#include "rpc/fd_frames.h"
#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {

absl::StatusOr<std::unique_ptr<ControlClient>> ControlClient::Connect(
    const std::string& socket_path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.empty() || socket_path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        StrCat("bad control socket path '", socket_path, "'"));
  }
  std::memcpy(addr.sun_path, socket_path.data(), socket_path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(StrCat("socket: ", ErrnoText(errno)));
  }
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(
        StrCat("cannot connect to ", socket_path, ": ", ErrnoText(err)));
  }
  return std::unique_ptr<ControlClient>(new ControlClient(fd, socket_path));
}

ControlClient::~ControlClient() {
  if (fd_ >= 0) close(fd_);
}

absl::StatusOr<proto::ControlResponse> ControlClient::Call(
    const proto::ControlRequest& request, absl::Duration timeout) {
  if (fd_ < 0) {
    return absl::UnavailableError(
        StrCat("connection to ", path_, " is closed"));
  }
  const absl::Time deadline = absl::Now() + timeout;
  proto::ControlRequest req = request;
  req.set_protocol_version(kControlProtocolVersion);
  const uint64_t id = next_id_++;
  req.set_request_id(id);
  proto::RpcRequest rpc;
  rpc.set_id(id);
  rpc.set_deadline_ms(static_cast<uint32_t>(
      std::min<int64_t>(absl::ToInt64Milliseconds(timeout), UINT32_MAX)));
  *rpc.mutable_control() = std::move(req);
  // One request, one reply: nothing of the stream is left between calls.
  FdFrameStream stream(fd_, kControlFrameLimits);
  absl::Status s = stream.Write(rpc, deadline);
  proto::RpcReply reply;
  if (s.ok()) s = stream.Read(&reply, deadline);
  if (s.ok() && reply.id() != id) {
    s = absl::DataLossError(
        StrCat("response for request ", reply.id(), ", expected ", id));
  }
  if (s.ok() && reply.code() != 0) {
    // The host refused the request itself (not its content).
    return absl::Status(static_cast<absl::StatusCode>(reply.code()),
                        StrCat(path_, ": ", reply.message()));
  }
  if (!s.ok()) {
    // The stream is out of step now: no more calls on it.
    close(fd_);
    fd_ = -1;
    if (absl::IsOutOfRange(s)) {
      return absl::UnavailableError(
          StrCat(path_, ": the host closed the connection"));
    }
    if (absl::IsDeadlineExceeded(s)) {
      return absl::DeadlineExceededError(
          StrCat(path_, ": no answer within ", absl::FormatDuration(timeout)));
    }
    return absl::Status(s.code(), StrCat(path_, ": ", s.message()));
  }
  return std::move(*reply.mutable_control());
}

}  // namespace sroute

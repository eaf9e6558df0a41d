// SPDX-License-Identifier: Apache-2.0
#include "rpc/fd_frames.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {
namespace {

// Waits until `fd` is ready for `events`, the deadline passes or `cancel_fd`
// becomes readable.
absl::Status WaitFor(int fd, short events, absl::Time deadline, int cancel_fd) {
  while (true) {
    int timeout_ms = -1;
    if (deadline != absl::InfiniteFuture()) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError("connection timed out");
      }
      timeout_ms = static_cast<int>(std::min<int64_t>(
          absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1))),
          1 << 30));
    }
    pollfd fds[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    const int n = poll(fds, cancel_fd >= 0 ? 2 : 1, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(StrCat("poll: ", ErrnoText(errno)));
    }
    if (n == 0) continue;  // re-check the deadline
    if (cancel_fd >= 0 && fds[1].revents != 0) {
      return absl::CancelledError("connection closing");
    }
    if (fds[0].revents != 0) return absl::OkStatus();
  }
}

}  // namespace

absl::Status FdFrameStream::Write(const google::protobuf::MessageLite& msg,
                                  absl::Time deadline) {
  std::string frame;
  if (absl::Status s = AppendFrame(msg, {}, limits_, &frame); !s.ok()) {
    return s;
  }
  size_t done = 0;
  while (done < frame.size()) {
    if (absl::Status s = WaitFor(fd_, POLLOUT, deadline, -1); !s.ok()) {
      return s;
    }
    const ssize_t w =
        send(fd_, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(StrCat("write: ", ErrnoText(errno)));
    }
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status FdFrameStream::Read(google::protobuf::MessageLite* msg,
                                 absl::Time deadline, int cancel_fd) {
  while (true) {
    Frame frame;
    bool got = false;
    if (absl::Status s = decoder_.Next(&frame, &got); !s.ok()) return s;
    if (got) {
      if (!frame.payload.empty()) {
        return absl::InvalidArgumentError(
            StrCat("a ", msg->GetTypeName(), " frame came with a payload"));
      }
      if (!msg->ParseFromArray(frame.header.data(),
                               static_cast<int>(frame.header.size()))) {
        return absl::InvalidArgumentError(
            StrCat("a frame of ", frame.header.size(),
                   " bytes does not parse as ", msg->GetTypeName()));
      }
      return absl::OkStatus();
    }
    if (absl::Status s = WaitFor(fd_, POLLIN, deadline, cancel_fd); !s.ok()) {
      return s;
    }
    std::span<char> space = decoder_.WriteSpace(4096);
    const ssize_t r = read(fd_, space.data(), space.size());
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::DataLossError(StrCat("read: ", ErrnoText(errno)));
    }
    if (r == 0) {
      if (decoder_.buffered() == 0) {
        return absl::OutOfRangeError("end of stream");
      }
      return absl::DataLossError(StrCat("the stream ended inside a frame (",
                                        decoder_.buffered(), " bytes of it)"));
    }
    decoder_.Commit(static_cast<size_t>(r));
  }
}

}  // namespace sroute

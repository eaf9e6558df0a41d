#include "control/framing.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
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
        return absl::DeadlineExceededError("control connection timed out");
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
      return absl::CancelledError("control connection closing");
    }
    if (fds[0].revents != 0) return absl::OkStatus();
  }
}

// Reads exactly `n` bytes. `*got` counts the bytes read.
absl::Status ReadFull(int fd, char* buf, size_t n, size_t* got,
                      absl::Time deadline, int cancel_fd) {
  *got = 0;
  while (*got < n) {
    if (absl::Status s = WaitFor(fd, POLLIN, deadline, cancel_fd); !s.ok()) {
      return s;
    }
    const ssize_t r = read(fd, buf + *got, n - *got);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::DataLossError(StrCat("read: ", ErrnoText(errno)));
    }
    if (r == 0) {
      if (*got == 0) return absl::OutOfRangeError("end of stream");
      return absl::DataLossError(
          StrCat("short read: got ", *got, " of ", n, " bytes"));
    }
    *got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFrame(int fd, const google::protobuf::MessageLite& msg,
                        absl::Time deadline) {
  std::string body;
  if (!msg.SerializeToString(&body)) {
    return absl::InternalError("cannot serialize control message");
  }
  if (body.size() > kMaxFrameBytes) {
    return absl::ResourceExhaustedError(
        StrCat("control message of ", body.size(), " bytes exceeds the ",
               kMaxFrameBytes, "-byte frame limit"));
  }
  const uint32_t n = static_cast<uint32_t>(body.size());
  std::string frame(4, '\0');
  frame[0] = static_cast<char>(n >> 24);
  frame[1] = static_cast<char>(n >> 16);
  frame[2] = static_cast<char>(n >> 8);
  frame[3] = static_cast<char>(n);
  frame += body;
  size_t done = 0;
  while (done < frame.size()) {
    if (absl::Status s = WaitFor(fd, POLLOUT, deadline, -1); !s.ok()) return s;
    const ssize_t w =
        send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(StrCat("write: ", ErrnoText(errno)));
    }
    done += static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status ReadFrame(int fd, google::protobuf::MessageLite* msg,
                       absl::Time deadline, int cancel_fd) {
  unsigned char len[4];
  size_t got = 0;
  if (absl::Status s = ReadFull(fd, reinterpret_cast<char*>(len), 4, &got,
                                deadline, cancel_fd);
      !s.ok()) {
    return s;
  }
  const uint32_t n = (uint32_t{len[0]} << 24) | (uint32_t{len[1]} << 16) |
                     (uint32_t{len[2]} << 8) | uint32_t{len[3]};
  if (n > kMaxFrameBytes) {
    return absl::ResourceExhaustedError(
        StrCat("frame announces ", n, " bytes; the limit is ", kMaxFrameBytes));
  }
  std::string body(n, '\0');
  if (absl::Status s = ReadFull(fd, body.data(), n, &got, deadline, cancel_fd);
      !s.ok()) {
    if (absl::IsOutOfRange(s)) {
      return absl::DataLossError(
          StrCat("short read: frame of ", n, " bytes ended after 0"));
    }
    return s;
  }
  if (!msg->ParseFromString(body)) {
    return absl::InvalidArgumentError(StrCat(
        "a frame of ", n, " bytes does not parse as ", msg->GetTypeName()));
  }
  return absl::OkStatus();
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// FdFrameStream: the RPC framing (rpc/frame.h) on a connected, blocking
// socket, one frame at a time, every wait bounded by a deadline. For the
// hosts' unix control sockets (hostctl/control_server.h), whose few small
// requests are served by a thread each; the data plane uses the Asio
// transport (rpc/server.h, rpc/channel.h) with the same frames.
//
// Thread safety: not thread-safe; one reader and one writer at a time.
#ifndef SROUTE_RPC_FD_FRAMES_H_
#define SROUTE_RPC_FD_FRAMES_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"
#include "rpc/frame.h"

namespace sroute {

class FdFrameStream {
 public:
  // REQUIRES: `fd` outlives the stream (it is not closed here).
  FdFrameStream(int fd, FrameLimits limits)
      : fd_(fd), limits_(limits), decoder_(limits) {}

  // Sends `msg` as one frame (no payload). DeadlineExceeded after
  // `deadline`; ResourceExhausted if `msg` breaks the limits.
  absl::Status Write(const google::protobuf::MessageLite& msg,
                     absl::Time deadline);

  // Reads the next frame into `msg`. Errors: OutOfRange at a clean end of
  // stream between frames, DataLoss when it ends inside one,
  // ResourceExhausted on an oversized frame, InvalidArgument when the
  // message does not parse or comes with a payload, DeadlineExceeded after
  // `deadline`, Cancelled once `cancel_fd` (if >= 0) is readable. After an
  // error the stream is out of step: close it.
  absl::Status Read(google::protobuf::MessageLite* msg, absl::Time deadline,
                    int cancel_fd = -1);

 private:
  const int fd_;
  const FrameLimits limits_;
  FrameDecoder decoder_;
};

}  // namespace sroute

#endif  // SROUTE_RPC_FD_FRAMES_H_

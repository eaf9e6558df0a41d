// Framing for the control port: a frame is a 4-byte big-endian length and
// then that many bytes of a serialized protobuf message. Frames are at most
// kMaxFrameBytes; a larger announced length, a short read or a message that
// does not parse is an error (the caller closes the connection).
#ifndef SROUTE_CONTROL_FRAMING_H_
#define SROUTE_CONTROL_FRAMING_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "google/protobuf/message_lite.h"

namespace sroute {

inline constexpr uint32_t kMaxFrameBytes = 4u << 20;  // 4 MiB

// Writes `msg` as one frame on `fd`. With a finite `deadline` waits (poll)
// at most until then; DeadlineExceeded on timeout.
absl::Status WriteFrame(int fd, const google::protobuf::MessageLite& msg,
                        absl::Time deadline = absl::InfiniteFuture());

// Reads one frame from `fd` into `msg`. Errors: OutOfRange at a clean end of
// stream before any byte of the frame, DataLoss on a short read,
// ResourceExhausted on an oversized length, InvalidArgument when the bytes
// do not parse, DeadlineExceeded on timeout, Cancelled when `cancel_fd`
// (if >= 0) becomes readable.
absl::Status ReadFrame(int fd, google::protobuf::MessageLite* msg,
                       absl::Time deadline = absl::InfiniteFuture(),
                       int cancel_fd = -1);

}  // namespace sroute

#endif  // SROUTE_CONTROL_FRAMING_H_

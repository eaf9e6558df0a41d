// SPDX-License-Identifier: Apache-2.0
// RPC framing (proto/rpc.proto): a frame is an 8-byte prefix (u32
// big-endian header length H, u32 big-endian payload length P), H bytes of a
// serialized protobuf message and P bytes of raw payload. Payloads stay out
// of the message so bulk data is never re-encoded.
//
// FrameDecoder turns a byte stream into frames, checking limits before it
// buffers anything: an oversized frame is an error as soon as its prefix
// arrives. It is pure logic (no IO), so it can be fuzzed.
#ifndef SROUTE_RPC_FRAME_H_
#define SROUTE_RPC_FRAME_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"

namespace sroute {

inline constexpr size_t kFramePrefixBytes = 8;

struct FrameLimits {
  uint32_t max_header = 32u << 20;   // a message (a large readdir): 32 MiB
  uint32_t max_payload = 16u << 20;  // bulk data: 16 MiB
};

// Limits while the handshake runs: nothing big is read from a peer that has
// not proved it knows the secret.
inline constexpr FrameLimits kHandshakeLimits{1024, 0};

// Appends one frame to `out`. ResourceExhausted if it would break `limits`.
absl::Status AppendFrame(const google::protobuf::MessageLite& message,
                         std::span<const char> payload,
                         const FrameLimits& limits, std::string* out);

struct Frame {
  std::string_view header;
  std::span<const char> payload;
  // When the read that completed this frame returned (util/clock.h
  // MonotonicNanos; 0 if not known): a frame handled later than that waited
  // behind the frames read with it.
  uint64_t received_ns = 0;
};

class FrameDecoder {
 public:
  explicit FrameDecoder(FrameLimits limits);

  void set_limits(FrameLimits limits) { limits_ = limits; }

  // Space for at least `min_bytes` more bytes of input (call Commit with how
  // many were put there). Invalidates frames returned by Next.
  std::span<char> WriteSpace(size_t min_bytes = 64 * 1024);
  void Commit(size_t n);
  // Copies `data` in (WriteSpace + Commit).
  void Feed(std::string_view data);

  // The next complete frame, if one is buffered: sets *got and *frame
  // (views into the buffer, valid until the next call of any method).
  // *got is false when more bytes are needed. An error (a length over the
  // limits) is final: the stream cannot be resynchronized.
  absl::Status Next(Frame* frame, bool* got);

  // Bytes buffered and not yet returned as frames.
  size_t buffered() const { return end_ - begin_; }

 private:
  FrameLimits limits_;
  std::vector<char> buf_;
  size_t begin_ = 0;  // first unconsumed byte
  size_t end_ = 0;    // one past the last byte read
  absl::Status error_;
};

}  // namespace sroute

#endif  // SROUTE_RPC_FRAME_H_

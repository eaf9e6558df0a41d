// SPDX-License-Identifier: Apache-2.0
#include "rpc/frame.h"

#include <cstring>

#include "util/strings.h"

namespace sroute {
namespace {

void PutU32(char* p, uint32_t v) {
  p[0] = static_cast<char>(v >> 24);
  p[1] = static_cast<char>(v >> 16);
  p[2] = static_cast<char>(v >> 8);
  p[3] = static_cast<char>(v);
}

uint32_t GetU32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) |
         (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

}  // namespace

absl::Status AppendFrame(const google::protobuf::MessageLite& message,
                         std::span<const char> payload,
                         const FrameLimits& limits, std::string* out) {
  const size_t h = message.ByteSizeLong();
  if (h > limits.max_header) {
    return absl::ResourceExhaustedError(
        StrCat("a ", message.GetTypeName(), " of ", h,
               " bytes exceeds the frame limit of ", limits.max_header));
  }
  if (payload.size() > limits.max_payload) {
    return absl::ResourceExhaustedError(
        StrCat("a payload of ", payload.size(),
               " bytes exceeds the frame limit of ", limits.max_payload));
  }
  const size_t at = out->size();
  out->resize(at + kFramePrefixBytes + h + payload.size());
  char* p = out->data() + at;
  PutU32(p, static_cast<uint32_t>(h));
  PutU32(p + 4, static_cast<uint32_t>(payload.size()));
  message.SerializeWithCachedSizesToArray(
      reinterpret_cast<uint8_t*>(p + kFramePrefixBytes));
  if (!payload.empty()) {
    std::memcpy(p + kFramePrefixBytes + h, payload.data(), payload.size());
  }
  return absl::OkStatus();
}

FrameDecoder::FrameDecoder(FrameLimits limits) : limits_(limits) {}

std::span<char> FrameDecoder::WriteSpace(size_t min_bytes) {
  if (begin_ == end_) {
    begin_ = end_ = 0;
    // A huge frame passed: do not keep its buffer for every later read.
    if (buf_.size() > (4u << 20)) std::vector<char>().swap(buf_);
  }
  if (buf_.size() - end_ < min_bytes) {
    // Move what is left to the front before growing.
    if (begin_ > 0) {
      std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (buf_.size() - end_ < min_bytes) buf_.resize(end_ + min_bytes);
  }
  return std::span<char>(buf_.data() + end_, buf_.size() - end_);
}

void FrameDecoder::Commit(size_t n) { end_ += n; }

void FrameDecoder::Feed(std::string_view data) {
  if (data.empty()) return;
  std::span<char> space = WriteSpace(data.size());
  std::memcpy(space.data(), data.data(), data.size());
  Commit(data.size());
}

absl::Status FrameDecoder::Next(Frame* frame, bool* got) {
  *got = false;
  if (!error_.ok()) return error_;
  const size_t avail = end_ - begin_;
  if (avail < kFramePrefixBytes) return absl::OkStatus();
  const char* p = buf_.data() + begin_;
  const uint32_t h = GetU32(p);
  const uint32_t n = GetU32(p + 4);
  if (h > limits_.max_header) {
    error_ = absl::ResourceExhaustedError(StrCat("frame header of ", h,
                                                 " bytes exceeds the limit of ",
                                                 limits_.max_header));
    return error_;
  }
  if (n > limits_.max_payload) {
    error_ = absl::ResourceExhaustedError(StrCat("frame payload of ", n,
                                                 " bytes exceeds the limit of ",
                                                 limits_.max_payload));
    return error_;
  }
  const size_t total = kFramePrefixBytes + size_t{h} + n;
  if (avail < total) {
    // Make room for the whole frame now, so the next read can take it in
    // one go.
    if (buf_.size() - begin_ < total) {
      std::memmove(buf_.data(), buf_.data() + begin_, avail);
      end_ = avail;
      begin_ = 0;
      buf_.resize(total);
    }
    return absl::OkStatus();
  }
  frame->header = std::string_view(p + kFramePrefixBytes, h);
  frame->payload = std::span<const char>(p + kFramePrefixBytes + h, n);
  begin_ += total;
  *got = true;
  return absl::OkStatus();
}

}  // namespace sroute

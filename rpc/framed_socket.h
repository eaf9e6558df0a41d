// SPDX-License-Identifier: Apache-2.0
// FramedSocket: one TCP connection carrying frames (rpc/frame.h), shared by
// the RPC server and client (internal to rpc/).
//
// Reading runs on the connection's strand: every complete frame is handed to
// the frame handler in order. Sending is thread-safe and cheap: when nobody
// else is sending, the caller's thread sends with one non-blocking send(2);
// frames sent meanwhile by other threads are queued and go out with the
// sender's next call, and frames sent while the strand handles a batch of
// frames go out together when the batch ends. Only what the kernel does not
// take at once is written by the strand. Frames never interleave.
//
// Thread safety: Send, Close and closed are thread-safe; the handlers run on
// the strand, one at a time. Lock order: mu_ is a leaf (no socket operation
// but a non-blocking send(2) or shutdown(2) runs under it).
#ifndef SROUTE_RPC_FRAMED_SOCKET_H_
#define SROUTE_RPC_FRAMED_SOCKET_H_

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "rpc/frame.h"
#include "util/mutex.h"

namespace sroute::rpc_internal {

using tcp = boost::asio::ip::tcp;
using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

class FramedSocket : public std::enable_shared_from_this<FramedSocket> {
 public:
  // Returns false to stop reading (the handler closed the socket).
  using FrameHandler = std::function<bool(const Frame&)>;
  // Runs once, on the strand, when the socket closes for any reason.
  using CloseHandler = std::function<void(const absl::Status&)>;

  // Most bytes queued for a peer that does not read before the connection
  // is closed as stuck.
  static constexpr size_t kMaxQueuedBytes = 256u << 20;

  // Bytes read and written, also added to the given counters (which must
  // outlive the socket) when not null.
  struct Traffic {
    std::atomic<uint64_t> in{0};
    std::atomic<uint64_t> out{0};
  };
  FramedSocket(tcp::socket socket, Strand strand, FrameLimits limits,
               std::shared_ptr<Traffic> traffic = nullptr);
  ~FramedSocket();

  // Starts the read loop. REQUIRES: called once.
  void Start(FrameHandler on_frame, CloseHandler on_close);
  // Queues `bytes` (whole frames) for sending. False if the socket is
  // closed (nothing is sent).
  bool Send(std::string_view bytes);
  // Closes the socket with `why` (idempotent): reads stop, queued bytes are
  // dropped, the close handler runs.
  void Close(absl::Status why);
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  // REQUIRES: on the strand (e.g. from the frame handler).
  void set_limits(FrameLimits limits) { decoder_.set_limits(limits); }
  Strand& strand() { return strand_; }
  tcp::socket& socket() { return socket_; }
  const std::string& peer() const { return peer_; }

 private:
  void ReadMore();
  void Cork() ABSL_LOCKS_EXCLUDED(mu_);    // on the strand
  void Uncork() ABSL_LOCKS_EXCLUDED(mu_);  // on the strand
  // Sends `bytes` and then whatever others queued. REQUIRES: sending_ set
  // by this thread.
  void SendNow(std::string_view bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Clears sending_ and unlocks `l`, which holds mu_.
  void StopSending(ReleasableMutexLock& l) ABSL_UNLOCK_FUNCTION(mu_);
  void WriteQueued() ABSL_LOCKS_EXCLUDED(mu_);  // on the strand
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);     // on the strand

  tcp::socket socket_;
  Strand strand_;
  const std::shared_ptr<Traffic> traffic_;
  FrameDecoder decoder_;
  std::string peer_;
  FrameHandler on_frame_;
  CloseHandler on_close_;

  // Guards the sending state and close_reason_ (below). A leaf.
  Mutex mu_;
  absl::Status close_reason_ ABSL_GUARDED_BY(mu_);
  std::string queued_ ABSL_GUARDED_BY(mu_);  // bytes waiting to be sent
  // A thread is in SendNow (others queue behind it).
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a strand write is in flight
  bool corked_ ABSL_GUARDED_BY(mu_) = false;   // the strand handles a batch
  // Shutdown waits for the sender to close the descriptor.
  bool close_after_send_ ABSL_GUARDED_BY(mu_) = false;
  std::string in_write_;  // owned by the strand's write in flight
  std::string uncorked_;  // the strand's batch of answers
  std::atomic<bool> closed_{false};
  bool shut_ = false;  // on the strand
};

}  // namespace sroute::rpc_internal

#endif  // SROUTE_RPC_FRAMED_SOCKET_H_

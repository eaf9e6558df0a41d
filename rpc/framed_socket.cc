// SPDX-License-Identifier: Apache-2.0
#include "rpc/framed_socket.h"

#include <sys/socket.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>

#include "util/clock.h"
#include "util/errno_status.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute::rpc_internal {

FramedSocket::FramedSocket(tcp::socket socket, Strand strand,
                           FrameLimits limits, std::shared_ptr<Traffic> traffic)
    : socket_(std::move(socket)),
      strand_(std::move(strand)),
      traffic_(std::move(traffic)),
      decoder_(limits) {
  boost::system::error_code ec;
  const tcp::endpoint ep = socket_.remote_endpoint(ec);
  peer_ =
      ec ? std::string("?") : StrCat(ep.address().to_string(), ":", ep.port());
  socket_.set_option(tcp::no_delay(true), ec);
}

FramedSocket::~FramedSocket() = default;

void FramedSocket::Start(FrameHandler on_frame, CloseHandler on_close) {
  on_frame_ = std::move(on_frame);
  on_close_ = std::move(on_close);
  boost::asio::post(strand_, [self = shared_from_this()] { self->ReadMore(); });
}

void FramedSocket::ReadMore() {
  if (shut_) return;
  std::span<char> space = decoder_.WriteSpace();
  socket_.async_read_some(
      boost::asio::buffer(space.data(), space.size()),
      boost::asio::bind_executor(
          strand_,
          [self = shared_from_this()](boost::system::error_code ec, size_t n) {
            if (ec) {
              self->Close(ec == boost::asio::error::eof
                              ? absl::UnavailableError("peer closed")
                              : absl::UnavailableError(ec.message()));
              self->Shutdown();
              return;
            }
            self->decoder_.Commit(n);
            const uint64_t received_ns = MonotonicNanos();
            if (self->traffic_) {
              self->traffic_->in.fetch_add(n, std::memory_order_relaxed);
            }
            // Frames handled now may answer at once (a server reading from
            // a local directory): send those answers in one go at the end.
            self->Cork();
            while (!self->shut_) {
              Frame frame;
              bool got = false;
              absl::Status s = self->decoder_.Next(&frame, &got);
              if (!s.ok()) {
                self->Close(s);
                break;
              }
              if (!got) break;
              frame.received_ns = received_ns;
              if (!self->on_frame_(frame)) break;
            }
            self->Uncork();
            if (self->closed()) {
              self->Shutdown();
              return;
            }
            self->ReadMore();
          }));
}

void FramedSocket::Cork() {
  MutexLock l(&mu_);
  corked_ = true;
}

void FramedSocket::Uncork() {
  ReleasableMutexLock l(&mu_);
  corked_ = false;
  if (writing_ || sending_ || queued_.empty() || closed()) return;
  sending_ = true;
  uncorked_.clear();
  uncorked_.swap(queued_);
  l.Unlock();
  SendNow(uncorked_);
}

bool FramedSocket::Send(std::string_view bytes) {
  ReleasableMutexLock l(&mu_);
  if (closed()) return false;
  if (writing_ || sending_ || corked_) {
    // Whoever sends now (or the strand) takes these bytes along.
    if (queued_.size() + bytes.size() > kMaxQueuedBytes) {
      l.Unlock();
      Close(absl::ResourceExhaustedError(StrCat(
          "peer does not read: over ", kMaxQueuedBytes, " bytes queued")));
      return false;
    }
    queued_.append(bytes);
    return true;
  }
  sending_ = true;
  l.Unlock();
  SendNow(bytes);
  return true;
}

void FramedSocket::SendNow(std::string_view bytes) {
  // Other threads queue while this one sends, outside the lock; it then
  // sends what they queued, so concurrent senders share system calls.
  thread_local std::string batch;
  while (true) {
    size_t done = 0;
    int err = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ::send(socket_.native_handle(), bytes.data() + done,
                 bytes.size() - done, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        done += static_cast<size_t>(n);
        if (traffic_) traffic_->out.fetch_add(n, std::memory_order_relaxed);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      err = n < 0 ? errno : EPIPE;
      break;
    }
    ReleasableMutexLock l(&mu_);
    if (err != 0 || closed()) {
      StopSending(l);
      if (err != 0) Close(ErrnoStatus(err, "send"));
      return;
    }
    if (done < bytes.size()) {
      // The kernel's buffer is full: the strand writes the rest, then
      // whatever was queued behind it.
      queued_.insert(0, bytes.substr(done));
      writing_ = true;
      StopSending(l);
      boost::asio::post(strand_,
                        [self = shared_from_this()] { self->WriteQueued(); });
      return;
    }
    if (queued_.empty() || corked_) {
      StopSending(l);
      return;
    }
    batch.clear();
    batch.swap(queued_);
    l.Unlock();
    bytes = batch;
  }
}

// The analysis cannot tell that `l` holds mu_; the callers' side of the
// ABSL_UNLOCK_FUNCTION(mu_) contract is checked.
void FramedSocket::StopSending(ReleasableMutexLock& l)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  sending_ = false;
  const bool close_now = close_after_send_;
  l.Unlock();
  // Shutdown waited for this sender before closing the descriptor.
  if (close_now) {
    boost::asio::post(strand_,
                      [self = shared_from_this()] { self->Shutdown(); });
  }
}

void FramedSocket::WriteQueued() {
  {
    MutexLock l(&mu_);
    if (shut_ || closed() || queued_.empty()) {
      writing_ = false;
      return;
    }
    in_write_.clear();
    in_write_.swap(queued_);
  }
  boost::asio::async_write(
      socket_, boost::asio::buffer(in_write_),
      boost::asio::bind_executor(strand_, [self = shared_from_this()](
                                              boost::system::error_code ec,
                                              size_t n) {
        if (self->traffic_) {
          self->traffic_->out.fetch_add(n, std::memory_order_relaxed);
        }
        if (ec) {
          self->Close(absl::UnavailableError(StrCat("write: ", ec.message())));
          self->Shutdown();
          return;
        }
        self->WriteQueued();
      }));
}

void FramedSocket::Close(absl::Status why) {
  {
    MutexLock l(&mu_);
    if (closed()) return;
    closed_.store(true, std::memory_order_release);
    close_reason_ = std::move(why);
    queued_.clear();
  }
  boost::asio::post(strand_, [self = shared_from_this()] { self->Shutdown(); });
}

void FramedSocket::Shutdown() {
  if (shut_) return;
  {
    MutexLock l(&mu_);
    if (sending_) {
      // A thread is in send(2) on the descriptor: closing it now could hand
      // the number to another file. Stop the traffic; the sender comes back
      // here when it is done.
      close_after_send_ = true;
      ::shutdown(socket_.native_handle(), SHUT_RDWR);
      return;
    }
  }
  shut_ = true;
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  absl::Status reason;
  {
    MutexLock l(&mu_);
    reason = close_reason_;
  }
  if (on_close_) {
    CloseHandler h = std::move(on_close_);
    on_close_ = nullptr;
    h(reason);
  }
  on_frame_ = nullptr;  // drop what the handler holds (cycles through self)
}

}  // namespace sroute::rpc_internal

// SPDX-License-Identifier: Apache-2.0
// IoThreads: a Boost.Asio io_context run by a few threads of its own, on
// which RPC connections do their network work.
//
// Polling (a poll window > 0) trades CPU for latency: one thread runs the
// context and, after each event, keeps checking for the next one for up to
// the window before it sleeps, yielding the CPU to anything else runnable
// meanwhile. Waking a sleeping thread costs tens of microseconds on a
// virtual machine (an interrupt to an idle CPU), several times per request
// on a FUSE volume with a remote home; a request that arrives within the
// window costs none of them.
//
// Adaptive polling (the daemons' default) polls only while it pays: it
// keeps a moving share of the events that came within the window of the
// one before (a poll that ran out counts as a miss), and polls while that
// share is at least half; otherwise it sleeps at once. A steady stream of
// requests is polled for; an idle or trickling process sleeps (as the
// kernel's hybrid polling sleeps when polling would mostly spin).
//
// Thread safety: thread-safe. The destructor stops the context and joins
// the threads; every connection using it must be closed first.
#ifndef SROUTE_RPC_IO_THREADS_H_
#define SROUTE_RPC_IO_THREADS_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace sroute {

class IoThreads {
 public:
  enum class Polling { kAlways, kAdaptive };
  // REQUIRES: threads >= 1; the process does not fork while they run
  // (daemons fork before they build anything: host/detach.h). With a poll
  // window (above), one thread serves the context, whatever `threads` says:
  // a second one would sleep in the reactor the poller needs.
  explicit IoThreads(int threads, std::chrono::microseconds poll_window = {},
                     Polling polling = Polling::kAlways);
  ~IoThreads();
  IoThreads(const IoThreads&) = delete;
  IoThreads& operator=(const IoThreads&) = delete;

  boost::asio::io_context& context() { return *context_; }
  int size() const { return count_; }
  // Times the poller went on polling after an event instead of sleeping.
  uint64_t poll_turns() const {
    return poll_turns_.load(std::memory_order_relaxed);
  }

  // Stops running handlers and joins the threads (idempotent): no handler
  // runs after it returns. Work still queued is dropped.
  void Stop();

 private:
  void Run();
  void Poll();
  const int count_;
  const std::chrono::microseconds poll_window_;
  const Polling polling_;
  std::atomic<uint64_t> poll_turns_{0};
  struct Guard;
  std::unique_ptr<boost::asio::io_context> context_;
  std::unique_ptr<Guard> guard_;
  std::vector<std::thread> threads_;
};

}  // namespace sroute

#endif  // SROUTE_RPC_IO_THREADS_H_

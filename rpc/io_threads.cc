// SPDX-License-Identifier: Apache-2.0
#include "rpc/io_threads.h"

#include <sched.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "util/log.h"

namespace sroute {

struct IoThreads::Guard {
  explicit Guard(boost::asio::io_context& c)
      : work(boost::asio::make_work_guard(c)) {}
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work;
};

IoThreads::IoThreads(int threads, std::chrono::microseconds poll_window,
                     Polling polling)
    : count_(poll_window.count() > 0 ? 1 : threads),
      poll_window_(poll_window),
      polling_(polling),
      context_(std::make_unique<boost::asio::io_context>(count_)),
      guard_(std::make_unique<Guard>(*context_)) {
  Run();
}

void IoThreads::Run() {
  for (int i = 0; i < count_; ++i) {
    threads_.emplace_back([this] {
      // Handlers do not throw (errors are statuses); should one do so
      // anyway, log it and keep the thread serving.
      while (true) {
        try {
          if (poll_window_.count() > 0) {
            Poll();
          } else {
            context_->run();
          }
          return;
        } catch (const std::exception& e) {
          LogError("io thread: uncaught exception: ", e.what());
        }
      }
    });
  }
}

void IoThreads::Poll() {
  using Clock = std::chrono::steady_clock;
  // Adaptive: the share of quiet moments (the context found empty after an
  // event) that ended with an event within the window, in 1/256ths, as a
  // moving average over about the last eight. Events that come back to back
  // (the several of one request) do not count: only whether waiting for
  // the next one pays.
  int hits = 0;
  auto note = [&](bool hit) { hits += ((hit ? 256 : 0) - hits) / 8; };
  bool polling = polling_ == Polling::kAlways;
  bool quiet = false;  // found empty since the last event
  auto quiet_since = Clock::now();
  while (!context_->stopped()) {
    if (context_->poll() > 0) {
      if (quiet) note(Clock::now() - quiet_since < poll_window_);
      quiet = false;
    } else {
      const auto now = Clock::now();
      if (!quiet) {
        quiet = true;
        quiet_since = now;
        if (polling) poll_turns_.fetch_add(1, std::memory_order_relaxed);
      }
      if (polling && now - quiet_since < poll_window_) {
        sched_yield();  // let whatever else is runnable here have the CPU
      } else {
        if (polling) note(false);  // the window ran out
        context_->run_one();       // sleeps until the next event
        if (!polling) note(Clock::now() - quiet_since < poll_window_);
        quiet = false;
      }
    }
    if (polling_ == Polling::kAdaptive) polling = hits >= 128;
  }
}

IoThreads::~IoThreads() { Stop(); }

void IoThreads::Stop() {
  guard_.reset();
  context_->stop();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

}  // namespace sroute

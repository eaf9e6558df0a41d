// SPDX-License-Identifier: Apache-2.0
// Signal: a one-time signal between threads (an IO's completion and the
// thread that waits for it).
//
//   Signal done;
//   io.set_completion([&done](Io&) { done.Notify(); });
//   sw->SubmitOwn(&io, file);
//   done.Wait();
//
// Not absl::Notification: Debian's abseil is not built with
// ThreadSanitizer, which then sees no order between the IO thread's writes
// to an Io and the waiter's reads. Thread-safe.
#ifndef SROUTE_UTIL_SIGNAL_H_
#define SROUTE_UTIL_SIGNAL_H_

#include <chrono>

#include "util/mutex.h"

namespace sroute {

class Signal {
 public:
  void Notify() {
    MutexLock l(&mu_);
    done_ = true;
    cv_.SignalAll();
  }
  void Wait() {
    MutexLock l(&mu_);
    while (!done_) cv_.Wait(&mu_);
  }
  // false if `timeout` passed first.
  template <class Rep, class Period>
  bool WaitFor(const std::chrono::duration<Rep, Period>& timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    MutexLock l(&mu_);
    while (!done_) {
      if (cv_.WaitUntil(&mu_, deadline) == std::cv_status::timeout) {
        return done_;
      }
    }
    return true;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sroute

#endif  // SROUTE_UTIL_SIGNAL_H_

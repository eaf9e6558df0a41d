// SPDX-License-Identifier: Apache-2.0
// Background: runs slow requests (drains, record listings, updates) on
// threads of their own, so they never hold a network thread; the destructor
// waits until all of them finished and their functions (with everything
// they captured) are destroyed.
//
// Thread safety: thread-safe.
#ifndef SROUTE_UTIL_BACKGROUND_H_
#define SROUTE_UTIL_BACKGROUND_H_

#include <functional>
#include <thread>

#include "util/mutex.h"

namespace sroute {

class Background {
 public:
  Background() = default;
  ~Background() { Wait(); }
  // Returns once nothing runs.
  void Wait() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock l(&mu_);
    while (running_ != 0) cv_.Wait(&mu_);
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  void Run(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock l(&mu_);
      ++running_;
    }
    std::thread([this, fn = std::move(fn)]() mutable {
      {
        // The job and what it holds (an RPC call, its connection) go
        // before Wait() may return: the thread's own state is destroyed
        // only after this lambda, when the owner may be gone.
        std::function<void()> job = std::move(fn);
        job();
      }
      MutexLock l(&mu_);
      if (--running_ == 0) cv_.SignalAll();
    }).detach();
  }

 private:
  // Guards running_. A leaf: `fn` runs without it.
  Mutex mu_;
  CondVar cv_;  // running_ dropped to 0
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sroute

#endif  // SROUTE_UTIL_BACKGROUND_H_

// Background: runs slow requests (drains, record listings, updates) on
// threads of their own, so they never hold a network thread; the destructor
// waits until all of them finished.
//
// Thread safety: thread-safe.
#ifndef SROUTE_UTIL_BACKGROUND_H_
#define SROUTE_UTIL_BACKGROUND_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace sroute {

class Background {
 public:
  Background() = default;
  ~Background() { Wait(); }
  // Returns once nothing runs.
  void Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return running_ == 0; });
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;

  void Run(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++running_;
    }
    std::thread([this, fn = std::move(fn)] {
      fn();
      std::lock_guard<std::mutex> l(mu_);
      if (--running_ == 0) cv_.notify_all();
    }).detach();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0;
};

}  // namespace sroute

#endif  // SROUTE_UTIL_BACKGROUND_H_

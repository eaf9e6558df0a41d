// SPDX-License-Identifier: Apache-2.0
#include "util/helper_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <deque>
#include <list>
#include <thread>
#include <vector>

#include "util/mutex.h"

namespace sroute {
namespace {

thread_local BlockingCallTarget blocking_call_target;

using Work = absl::AnyInvocable<void() &&>;

}  // namespace

BlockingCallTarget BlockingCallsGoTo() { return blocking_call_target; }

ScopedBlockingCallTarget::ScopedBlockingCallTarget(BlockingCallTarget target)
    : old_(blocking_call_target) {
  blocking_call_target = target;
}

ScopedBlockingCallTarget::~ScopedBlockingCallTarget() {
  blocking_call_target = old_;
}

struct HelperPool::Impl {
  explicit Impl(Options o)
      : options(o), lanes(static_cast<size_t>(std::max(1, o.lanes))) {}

  struct Lane {
    // Guards this lane. Taken before overflow_mu and threads_mu, never
    // with another lane's.
    Mutex mu;
    CondVar cv;  // work queued, or stop
    std::deque<Work> queue ABSL_GUARDED_BY(mu);
    int idle ABSL_GUARDED_BY(mu) = 0;     // helpers waiting on cv
    int threads ABSL_GUARDED_BY(mu) = 0;  // helpers of this lane alive
  };

  const Options options;
  std::vector<Lane> lanes;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> posted{0};
  std::atomic<size_t> busy{0};

  // Work posted while every thread was taken: the first helper that comes
  // free takes it, whatever its lane. A leaf; taken inside a lane's mu.
  Mutex overflow_mu;
  std::deque<Work> overflow ABSL_GUARDED_BY(overflow_mu);
  std::atomic<size_t> overflow_size{0};  // overflow.size(), read unlocked

  // Guards the thread list. Taken inside a lane's mu (Reserve), never the
  // other way round.
  Mutex threads_mu;
  CondVar threads_cv;  // a thread ended
  size_t alive ABSL_GUARDED_BY(threads_mu) = 0;
  size_t peak ABSL_GUARDED_BY(threads_mu) = 0;
  std::list<std::thread> running ABSL_GUARDED_BY(threads_mu);
  std::vector<std::thread> ended ABSL_GUARDED_BY(threads_mu);  // to join

  // Reserves a thread for lane `l` if the bound allows; the caller then
  // calls Start.
  bool Reserve(Lane& l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l.mu) {
    MutexLock t(&threads_mu);
    if (stop.load() || alive >= static_cast<size_t>(options.max_threads)) {
      return false;
    }
    ++alive;
    peak = std::max(peak, alive);
    ++l.threads;
    return true;
  }

  void Start(int lane) ABSL_LOCKS_EXCLUDED(threads_mu) {
    std::vector<std::thread> to_join;
    MutexLock t(&threads_mu);
    to_join.swap(ended);
    running.emplace_front();
    auto self = running.begin();
    *self = std::thread([this, lane, self] { Run(lane, self); });
    // Joining ended threads takes no time: they returned already.
    for (std::thread& done : to_join) done.join();
  }

  void Post(int lane, Work work) {
    posted.fetch_add(1, std::memory_order_relaxed);
    Lane& l = lanes[static_cast<size_t>(lane) % lanes.size()];
    enum { kWake, kStart, kOverflow } how;
    {
      MutexLock m(&l.mu);
      // The lane's queue holds work a waiting or starting helper takes.
      if (l.queue.size() < static_cast<size_t>(l.idle)) {
        how = kWake;
      } else if (Reserve(l)) {
        how = kStart;
      } else {
        how = kOverflow;
        MutexLock o(&overflow_mu);
        overflow.push_back(std::move(work));
        overflow_size.fetch_add(1);
      }
      if (how != kOverflow) l.queue.push_back(std::move(work));
    }
    if (how == kWake) l.cv.Signal();
    if (how == kStart) Start(lane);
    if (how == kOverflow) WakeAnyIdle();
  }

  // Work overflowed: a helper waiting in any lane takes it (one that is
  // busy looks at the overflow when it is done).
  void WakeAnyIdle() {
    for (Lane& other : lanes) {
      bool has_idle;
      {
        MutexLock m(&other.mu);
        has_idle = other.idle > 0;
      }
      if (has_idle) {
        other.cv.Signal();
        return;
      }
    }
  }

  bool TakeOverflow(Work* out) {
    if (overflow_size.load() == 0) return false;
    MutexLock o(&overflow_mu);
    if (overflow.empty()) return false;
    *out = std::move(overflow.front());
    overflow.pop_front();
    overflow_size.fetch_sub(1);
    return true;
  }

  void Run(int lane, std::list<std::thread>::iterator self) {
    pthread_setname_np(pthread_self(), "helper");
    // Threads started by a SCHED_IDLE queue thread inherit its policy; a
    // helper runs as an ordinary thread (it may not be allowed to: then it
    // stays as it is).
    sched_param param{};
    sched_setscheduler(0, SCHED_OTHER, &param);
    if (options.pin) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(lane, &one);
      sched_setaffinity(0, sizeof(one), &one);  // a CPU we may not use: any
    }
    Lane& l = lanes[static_cast<size_t>(lane)];
    while (true) {
      Work work;
      {
        MutexLock m(&l.mu);
        if (!l.queue.empty()) {
          work = std::move(l.queue.front());
          l.queue.pop_front();
        } else if (!TakeOverflow(&work)) {
          if (stop.load()) {
            --l.threads;
            break;
          }
          ++l.idle;
          const bool woken =
              l.cv.WaitFor(&l.mu, options.idle_exit,
                           [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(l.mu) {
                             return !l.queue.empty() || stop.load() ||
                                    overflow_size.load() > 0;
                           });
          --l.idle;
          if (!woken && l.threads > 1) {
            --l.threads;
            break;
          }
          continue;
        }
      }
      busy.fetch_add(1, std::memory_order_relaxed);
      std::move(work)();
      work = nullptr;  // what it captured goes before the next one runs
      busy.fetch_sub(1, std::memory_order_relaxed);
    }
    MutexLock t(&threads_mu);
    ended.push_back(std::move(*self));
    running.erase(self);
    --alive;
    threads_cv.SignalAll();
  }

  ~Impl() {
    stop.store(true);
    for (Lane& l : lanes) {
      { MutexLock m(&l.mu); }  // a helper between its check and its wait
      l.cv.SignalAll();
    }
    MutexLock t(&threads_mu);
    while (alive > 0) threads_cv.Wait(&threads_mu);
    for (std::thread& done : ended) done.join();
    ended.clear();
  }
};

HelperPool::HelperPool(Options options)
    : impl_(std::make_unique<Impl>(options)) {}

HelperPool::~HelperPool() = default;

void HelperPool::Post(int lane, absl::AnyInvocable<void() &&> work) {
  impl_->Post(lane < 0 ? 0 : lane, std::move(work));
}

HelperPool::Stats HelperPool::stats() const {
  Stats s;
  s.posted = impl_->posted.load(std::memory_order_relaxed);
  s.busy = impl_->busy.load(std::memory_order_relaxed);
  for (Impl::Lane& l : impl_->lanes) {
    MutexLock m(&l.mu);
    s.queued += l.queue.size();
  }
  s.queued += impl_->overflow_size.load();
  MutexLock t(&impl_->threads_mu);
  s.threads = impl_->alive;
  s.peak_threads = impl_->peak;
  return s;
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// sroute::Mutex, MutexLock, ReleasableMutexLock, CondVar: std::mutex and
// std::condition_variable with Clang thread-safety annotations.
//
// Everything here is inline and adds nothing to std::mutex at run time: the
// annotations only feed Clang's -Wthread-safety (see
// scripts/thread_safety_build.sh). Conventions (docs/design.md §10):
//   - every lock's declaration says what it guards and its place in the lock
//     order, in a comment and with ABSL_ACQUIRED_AFTER/ABSL_ACQUIRED_BEFORE
//     where the other lock can be named from there;
//   - the members it guards carry ABSL_GUARDED_BY / ABSL_PT_GUARDED_BY;
//   - functions called with a lock held carry ABSL_EXCLUSIVE_LOCKS_REQUIRED;
//   - no lock is held across a wait for IO or a completion.
//
// Waiting: write the loop around CondVar::Wait so that the analysis sees the
// condition read under the lock:
//   MutexLock l(&mu_);
//   while (!done_) cv_.Wait(&mu_);
// The predicate overloads take a lambda, which the analysis checks as a
// function of its own: annotate it, e.g.
//   cv_.Wait(&mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_; });
#ifndef SROUTE_UTIL_MUTEX_H_
#define SROUTE_UTIL_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "absl/base/thread_annotations.h"

namespace sroute {

class CondVar;

// A std::mutex the analysis knows about. Lock()/Unlock() and the
// BasicLockable lock()/unlock() are the same operations.
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }
  // Tells the analysis the caller holds the lock (checks nothing at run
  // time): for callbacks the analysis cannot follow.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope (std::lock_guard).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  Mutex* const mu_;
};

// Holds `mu` from construction until Unlock() or the end of its scope, and
// can take it again with Lock() (std::unique_lock without the deferred and
// adopting forms).
class ABSL_SCOPED_LOCKABLE ReleasableMutexLock {
 public:
  explicit ReleasableMutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->Lock();
  }
  ReleasableMutexLock(const ReleasableMutexLock&) = delete;
  ReleasableMutexLock& operator=(const ReleasableMutexLock&) = delete;
  ~ReleasableMutexLock() ABSL_UNLOCK_FUNCTION() {
    if (held_) mu_->Unlock();
  }

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    mu_->Lock();
    held_ = true;
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    held_ = false;
    mu_->Unlock();
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

// A std::condition_variable that waits on a sroute::Mutex the caller holds.
// Like std::condition_variable, it may wake spuriously: wait in a loop (or
// with a predicate).
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();
  }
  // Returns std::cv_status::timeout if `deadline` passed.
  template <class Clock, class Duration>
  std::cv_status WaitUntil(
      Mutex* mu, const std::chrono::time_point<Clock, Duration>& deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    std::cv_status s = cv_.wait_until(l, deadline);
    l.release();
    return s;
  }
  template <class Rep, class Period>
  std::cv_status WaitFor(Mutex* mu,
                         const std::chrono::duration<Rep, Period>& timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    std::cv_status s = cv_.wait_for(l, timeout);
    l.release();
    return s;
  }

  // The predicate forms (as std::condition_variable's): `pred` runs with
  // `mu` held; annotate it ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu). They return
  // pred()'s last value.
  template <class Pred>
  void Wait(Mutex* mu, Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (!CallLocked(pred)) Wait(mu);
  }
  template <class Clock, class Duration, class Pred>
  bool WaitUntil(Mutex* mu,
                 const std::chrono::time_point<Clock, Duration>& deadline,
                 Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (!CallLocked(pred)) {
      if (WaitUntil(mu, deadline) == std::cv_status::timeout) {
        return CallLocked(pred);
      }
    }
    return true;
  }
  template <class Rep, class Period, class Pred>
  bool WaitFor(Mutex* mu, const std::chrono::duration<Rep, Period>& timeout,
               Pred pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    // As libstdc++'s wait_for: a steady-clock deadline.
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout,
                     std::move(pred));
  }

 private:
  // The analysis cannot tie the lambda's named lock to the `mu` parameter;
  // the callers' annotations on `pred` are checked where it is written.
  template <class Pred>
  static bool CallLocked(Pred& pred) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return pred();
  }

  std::condition_variable cv_;
};

}  // namespace sroute

#endif  // SROUTE_UTIL_MUTEX_H_

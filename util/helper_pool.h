// SPDX-License-Identifier: Apache-2.0
// HelperPool: threads that make the calls a thread which must never block
// hands over (a FUSE io_uring queue thread: while it blocks, the requests
// the kernel queued on its other ring entries wait with it).
//
// Work is posted to a lane, one per CPU: a lane's helpers run on its CPU
// only, so that handing work over wakes no other CPU (an idle CPU of a VM
// may be halted, and waking it costs tens of microseconds). A post wakes an
// idle helper of its lane or, if none is idle, starts one, so a helper
// stuck in a call (fsync on a hung disk, a read from a filesystem that
// stopped answering) holds only its own call. Threads are bounded
// (`max_threads` in all); past the bound, work waits in a queue of the
// pool's that the first helper to come free takes from, whatever its lane
// (after its own lane's work). A lane keeps one helper; others leave after
// `idle_exit` without work.
//
// Thread safety: thread-safe. The destructor runs the work queued and joins
// the helpers (it waits for calls in progress, however long they take).
#ifndef SROUTE_UTIL_HELPER_POOL_H_
#define SROUTE_UTIL_HELPER_POOL_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/functional/any_invocable.h"

namespace sroute {

class HelperPool {
 public:
  struct Options {
    int lanes = 1;  // CPUs 0..lanes-1; at least 1
    int max_threads = 64;
    std::chrono::milliseconds idle_exit{10'000};
    bool pin = true;  // run a lane's helpers on its CPU only
  };
  explicit HelperPool(Options options);
  ~HelperPool();
  HelperPool(const HelperPool&) = delete;
  HelperPool& operator=(const HelperPool&) = delete;

  // Runs `work` on a helper of lane `lane` (taken modulo the lanes).
  void Post(int lane, absl::AnyInvocable<void() &&> work);

  struct Stats {
    uint64_t posted = 0;
    size_t threads = 0;       // alive now
    size_t busy = 0;          // running work now
    size_t peak_threads = 0;  // most alive at once
    size_t queued = 0;        // waiting for a helper now
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Where the calling thread sends calls that may block: a pool and lane, or
// {nullptr, 0} (make them here, the default).
struct BlockingCallTarget {
  HelperPool* pool = nullptr;
  int lane = 0;
};
BlockingCallTarget BlockingCallsGoTo();

// Sets the calling thread's target for its lifetime (restores the old one).
class ScopedBlockingCallTarget {
 public:
  explicit ScopedBlockingCallTarget(BlockingCallTarget target);
  ~ScopedBlockingCallTarget();
  ScopedBlockingCallTarget(const ScopedBlockingCallTarget&) = delete;
  ScopedBlockingCallTarget& operator=(const ScopedBlockingCallTarget&) = delete;

 private:
  BlockingCallTarget old_;
};

}  // namespace sroute

#endif  // SROUTE_UTIL_HELPER_POOL_H_

// SPDX-License-Identifier: Apache-2.0
// The in-flight registry and drain waiters of an sSwitch (internal to
// sswitch/).
#ifndef SROUTE_SSWITCH_INFLIGHT_H_
#define SROUTE_SSWITCH_INFLIGHT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "sswitch/io.h"
#include "sswitch/snapshot.h"
#include "sswitch/sswitch.h"
#include "util/mutex.h"
#include "util/thread_shard.h"

namespace sroute {

// What Drain() waits on: one count per IO it found in flight.
struct DrainWaiter {
  // Guards remaining. Order: after InflightRegistry::Shard::mu; a leaf.
  Mutex mu;
  CondVar cv;
  // Starts with a guard held by Drain() itself.
  int64_t remaining ABSL_GUARDED_BY(mu) = 1;
};

// IOs between admission and completion, in intrusive lists sharded by thread
// so that routing threads rarely share a lock.
//
// Each shard also pins the current snapshot for the IOs it registers,
// through a reference count of its own (ShardLocalRef): an IO holds its
// snapshot until it completes, and with one count shared by all threads
// that count's cache line would move between the CPUs twice per IO.
class InflightRegistry {
 public:
  // Registers `io` and sets its snapshot to the current one: `version` is
  // the sSwitch's version, `load` returns its current snapshot.
  template <typename Load>
  void Register(Io* io, const std::atomic<uint64_t>& version, Load load) {
    const int s = ThreadShard();
    Shard& shard = shards_[s];
    MutexLock l(&shard.mu);
    // Under the shard's lock, after the IO is listed: a Drain() that scans
    // this shard after us published its quiesce before (see SSwitch::Route).
    if (shard.pin == nullptr ||
        shard.pin->version != version.load(std::memory_order_acquire)) {
      shard.pin = ShardLocalRef(load());
    }
    io->snapshot_ = shard.pin;
    io->inflight_shard_ = s;
    io->inflight_prev_ = nullptr;
    io->inflight_next_ = shard.head;
    if (shard.head != nullptr) shard.head->inflight_prev_ = io;
    shard.head = io;
    ++shard.count;
  }

  void Unregister(
      Io* io, absl::InlinedVector<std::shared_ptr<DrainWaiter>, 1>* waiters) {
    if (io->inflight_shard_ < 0) return;
    Shard& shard = shards_[io->inflight_shard_];
    MutexLock l(&shard.mu);
    if (io->inflight_prev_ != nullptr) {
      io->inflight_prev_->inflight_next_ = io->inflight_next_;
    } else {
      shard.head = io->inflight_next_;
    }
    if (io->inflight_next_ != nullptr) {
      io->inflight_next_->inflight_prev_ = io->inflight_prev_;
    }
    io->inflight_prev_ = io->inflight_next_ = nullptr;
    io->inflight_shard_ = -1;
    --shard.count;
    waiters->swap(io->drain_waiters_);
    io->drain_waiters_.clear();
  }

  // Sets `io`'s header.stage, under its shard's lock if it is listed
  // (Collect() reads the headers of listed IOs).
  void SetStage(Io* io, const std::string& stage) {
    if (io->inflight_shard_ < 0) {
      io->header.stage = stage;
      return;
    }
    MutexLock l(&shards_[io->inflight_shard_].mu);
    io->header.stage = stage;
  }

  // Attaches `waiter` to every in-flight IO that `m` matches.
  void Collect(const PatternMatcher& m,
               const std::shared_ptr<DrainWaiter>& waiter) {
    for (Shard& shard : shards_) {
      MutexLock l(&shard.mu);
      for (Io* io = shard.head; io != nullptr; io = io->inflight_next_) {
        if (!m.Matches(io->header)) continue;
        io->drain_waiters_.push_back(waiter);
        MutexLock wl(&waiter->mu);
        ++waiter->remaining;
      }
    }
  }

  // Drops the shards' pins, so that no snapshot outlives its replacement
  // but in the IOs routed with it.
  void Unpin() {
    for (Shard& shard : shards_) {
      std::shared_ptr<const Snapshot> old;  // released after the lock
      MutexLock l(&shard.mu);
      old.swap(shard.pin);
    }
  }

  // Marks the IOs no scan saw yet as seen `now`; appends those seen at
  // least `older_ns` ago (their header's identity and that lower bound of
  // their age).
  void Stale(uint64_t now, uint64_t older_ns,
             std::vector<SSwitch::StaleIo>* out) {
    for (Shard& shard : shards_) {
      MutexLock l(&shard.mu);
      for (Io* io = shard.head; io != nullptr; io = io->inflight_next_) {
        SSwitch::NoteStale(io, now, older_ns, /*parked=*/false, out);
      }
    }
  }

  int64_t total() const {
    int64_t n = 0;
    for (const Shard& shard : shards_) {
      MutexLock l(&shard.mu);
      n += shard.count;
    }
    return n;
  }

 private:
  struct alignas(64) Shard {
    // Guards the list (and the inflight_ and drain_waiters_ members of the
    // IOs in it), the count and the pin. Order: after QuiesceGate::mu,
    // before DrainWaiter::mu and SSwitch::publish_mu_.
    mutable Mutex mu;
    Io* head ABSL_GUARDED_BY(mu) = nullptr;
    int64_t count ABSL_GUARDED_BY(mu) = 0;
    // The current snapshot, or null.
    std::shared_ptr<const Snapshot> pin ABSL_GUARDED_BY(mu);
  };
  Shard shards_[kThreadShards];
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_INFLIGHT_H_

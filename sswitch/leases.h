// SPDX-License-Identifier: Apache-2.0
// LeaseKeeper: leases of rule owners that must not outlive their client.
//
// A client that installs rules for itself only (sroute-trace's taps) holds
// a lease on its owner name and renews it while it runs; when the client
// stops renewing — it was killed, its host lost it — the lease expires and
// the keeper calls `expire(owner)`, which deletes the owner's rules.
//
//   LeaseKeeper leases([&](const std::string& owner) { DeleteOwned(owner); });
//   leases.Hold("sroute-trace:1234@h", absl::Seconds(5));  // and again...
//   leases.Release("sroute-trace:1234@h");  // no expiry call
//
// A thread of its own runs the expiry calls, started with the first lease;
// Stop() (or the destructor) ends it: pending expiries are not called, and
// Hold and Release may still be called (an owner going away keeps its
// users safe until they are gone) but nothing expires any more.
//
// Thread safety: thread-safe. `expire` runs on the keeper's thread with no
// lock of the keeper held.
#ifndef SROUTE_SSWITCH_LEASES_H_
#define SROUTE_SSWITCH_LEASES_H_

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "util/mutex.h"

namespace sroute {

class LeaseKeeper {
 public:
  explicit LeaseKeeper(std::function<void(const std::string& owner)> expire);
  ~LeaseKeeper();
  LeaseKeeper(const LeaseKeeper&) = delete;
  LeaseKeeper& operator=(const LeaseKeeper&) = delete;

  // Holds (or renews) `owner`'s lease until `ttl` from now.
  // REQUIRES: ttl > 0, owner not empty.
  void Hold(const std::string& owner, absl::Duration ttl)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets `owner`'s lease; false if it held none.
  bool Release(const std::string& owner) ABSL_LOCKS_EXCLUDED(mu_);
  // The owners holding leases now.
  std::vector<std::string> Owners() const ABSL_LOCKS_EXCLUDED(mu_);
  // No expiry from now on; waits for one being called to return.
  // REQUIRES: not called from `expire`.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const std::function<void(const std::string&)> expire_;
  mutable Mutex mu_;  // a leaf
  CondVar changed_;
  std::map<std::string, Clock::time_point> deadlines_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_LEASES_H_

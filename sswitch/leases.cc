// SPDX-License-Identifier: Apache-2.0
#include "sswitch/leases.h"

#include <utility>

namespace sroute {

LeaseKeeper::LeaseKeeper(std::function<void(const std::string&)> expire)
    : expire_(std::move(expire)) {}

LeaseKeeper::~LeaseKeeper() { Stop(); }

void LeaseKeeper::Stop() {
  std::thread t;
  {
    MutexLock l(&mu_);
    stop_ = true;
    t = std::move(thread_);
  }
  changed_.SignalAll();
  if (t.joinable()) t.join();
}

void LeaseKeeper::Hold(const std::string& owner, absl::Duration ttl) {
  const auto deadline =
      Clock::now() + std::chrono::nanoseconds(absl::ToInt64Nanoseconds(ttl));
  MutexLock l(&mu_);
  deadlines_[owner] = deadline;
  if (!stop_ && !thread_.joinable()) thread_ = std::thread([this] { Run(); });
  changed_.SignalAll();
}

bool LeaseKeeper::Release(const std::string& owner) {
  MutexLock l(&mu_);
  return deadlines_.erase(owner) != 0;
}

std::vector<std::string> LeaseKeeper::Owners() const {
  std::vector<std::string> out;
  MutexLock l(&mu_);
  for (const auto& [owner, deadline] : deadlines_) out.push_back(owner);
  return out;
}

void LeaseKeeper::Run() {
  for (;;) {
    std::string due;
    {
      MutexLock l(&mu_);
      while (due.empty()) {
        if (stop_) return;
        auto next = Clock::time_point::max();
        const auto now = Clock::now();
        for (const auto& [owner, deadline] : deadlines_) {
          if (deadline <= now) {
            due = owner;
            break;
          }
          next = std::min(next, deadline);
        }
        if (!due.empty()) {
          deadlines_.erase(due);
        } else if (next == Clock::time_point::max()) {
          changed_.Wait(&mu_);
        } else {
          changed_.WaitUntil(&mu_, next);
        }
      }
    }
    // Outside the lock: the call deletes rules, and may renew others.
    expire_(due);
  }
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
#include "sswitch/trace.h"

#include <utility>

namespace sroute {

void Trace::Add(TraceHop hop) {
  MutexLock l(&mu_);
  if (hops_.size() >= kMaxHops) {
    ++dropped_;
    return;
  }
  hops_.push_back(std::move(hop));
}

void Trace::AddCall(std::vector<TraceHop> inner, TraceHop call) {
  MutexLock l(&mu_);
  if (hops_.size() + inner.size() + 1 > kMaxHops) {
    dropped_ += inner.size();  // the call alone still tells its time
    inner.clear();
  }
  for (TraceHop& h : inner) hops_.push_back(std::move(h));
  if (hops_.size() >= kMaxHops) {
    ++dropped_;
    return;
  }
  hops_.push_back(std::move(call));
}

std::vector<TraceHop> Trace::Hops() const {
  MutexLock l(&mu_);
  return hops_;
}

std::vector<TraceHop> Trace::TakeHops() {
  MutexLock l(&mu_);
  return std::move(hops_);
}

uint64_t Trace::dropped() const {
  MutexLock l(&mu_);
  return dropped_;
}

}  // namespace sroute

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

std::vector<TraceHop> Trace::Hops() const {
  MutexLock l(&mu_);
  return hops_;
}

uint64_t Trace::dropped() const {
  MutexLock l(&mu_);
  return dropped_;
}

}  // namespace sroute

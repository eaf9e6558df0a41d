// SPDX-License-Identifier: Apache-2.0
#include "sswitch/slow_ops.h"

#include <algorithm>
#include <utility>

namespace sroute {
namespace {

uint64_t Duration(const SlowIo& s) { return s.end_ns - s.start_ns; }

// The top list's heap order: its root is the shortest.
bool Longer(const SlowIo& a, const SlowIo& b) {
  return Duration(a) > Duration(b);
}

}  // namespace

void SlowOpLog::Add(SlowIo io) {
  MutexLock l(&mu_);
  io.seq = next_seq_++;
  if (top_.size() < kTop) {
    top_.push_back(io);
    std::push_heap(top_.begin(), top_.end(), Longer);
  } else if (Duration(io) > Duration(top_.front())) {
    std::pop_heap(top_.begin(), top_.end(), Longer);
    top_.back() = io;
    std::push_heap(top_.begin(), top_.end(), Longer);
  }
  if (recent_.size() >= kRecent) {
    recent_.pop_front();
    ++overwritten_;
  }
  recent_.push_back(std::move(io));
}

SlowOpLog::View SlowOpLog::Get(uint64_t after) const {
  View v;
  v.threshold_ns = threshold_ns();
  MutexLock l(&mu_);
  for (const SlowIo& s : recent_) {
    if (s.seq > after) v.recent.push_back(s);
  }
  v.top = top_;
  std::sort(v.top.begin(), v.top.end(), Longer);
  v.total = next_seq_ - 1;
  v.overwritten = overwritten_;
  return v;
}

void SlowOpLog::Clear() {
  MutexLock l(&mu_);
  recent_.clear();
  top_.clear();
  overwritten_ = 0;
  // Sequence numbers go on: a reader's `after` stays meaningful.
}

}  // namespace sroute

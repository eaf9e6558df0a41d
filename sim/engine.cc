// SPDX-License-Identifier: Apache-2.0
#include "sim/engine.h"

#include <memory>
#include <utility>

namespace sroute::sim {

void Engine::At(uint64_t t_ns, Event fn) {
  queue_.push(
      Scheduled{t_ns < now_ns_ ? now_ns_ : t_ns, next_order_++, std::move(fn)});
}

void Engine::Every(uint64_t period_ns, Event fn, uint64_t until_ns) {
  // The event schedules its next run before it runs (an event that stops
  // the loop by returning would otherwise need its own flag).
  auto tick = std::make_shared<std::function<void()>>();
  *tick = [this, period_ns, until_ns, fn = std::move(fn),
           weak = std::weak_ptr<std::function<void()>>(tick)] {
    if (now_ns_ + period_ns <= until_ns) {
      if (auto next = weak.lock()) At(now_ns_ + period_ns, *next);
    }
    fn();
  };
  if (now_ns_ + period_ns <= until_ns) At(now_ns_ + period_ns, *tick);
  ticks_.push_back(std::move(tick));
}

void Engine::Run(uint64_t until_ns) {
  stopped_ = false;
  while (!stopped_ && !queue_.empty() && queue_.top().t_ns <= until_ns) {
    // Moved out before it runs: it may schedule more.
    Scheduled next = std::move(const_cast<Scheduled&>(queue_.top()));
    queue_.pop();
    now_ns_ = next.t_ns;
    ++events_run_;
    next.fn();
  }
  if (!stopped_ && until_ns != UINT64_MAX && now_ns_ < until_ns) {
    now_ns_ = until_ns;
  }
}

}  // namespace sroute::sim

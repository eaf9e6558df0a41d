// SPDX-License-Identifier: Apache-2.0
// sim::Engine: a discrete-event loop in virtual time (nanoseconds). Events
// run in the order of their time, and those at the same time in the order
// they were scheduled, so a run depends on nothing but its inputs: the
// same scenario and seed give the same result (sroute-sim's determinism).
//
//   sim::Engine e;
//   e.At(1'000, [&] { device.Read(page, e.now_ns()); });
//   e.Every(200'000'000, [&] { app.Epoch(); });
//   e.Run(60'000'000'000);  // one simulated minute
//
// Not thread-safe: one thread runs a simulation (a run uses one core).
#ifndef SROUTE_SIM_ENGINE_H_
#define SROUTE_SIM_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <vector>

namespace sroute::sim {

class Engine {
 public:
  using Event = std::function<void()>;

  uint64_t now_ns() const { return now_ns_; }
  // Events run so far.
  uint64_t events_run() const { return events_run_; }
  // Events waiting.
  size_t pending() const { return queue_.size(); }

  // Runs `fn` at `t_ns`; a time in the past runs at the present (after
  // what is already due now).
  void At(uint64_t t_ns, Event fn);
  void After(uint64_t delay_ns, Event fn) { At(now_ns_ + delay_ns, fn); }
  // Runs `fn` every `period_ns` from now + period until `until_ns`.
  // REQUIRES: period_ns > 0.
  void Every(uint64_t period_ns, Event fn, uint64_t until_ns = UINT64_MAX);

  // Runs the events due up to `until_ns` (inclusive) in order; the clock
  // ends at `until_ns`, or at the last event's time when the queue empties
  // first (or Stop was called).
  void Run(uint64_t until_ns = UINT64_MAX);
  // Ends Run after the event under way; the events left wait.
  void Stop() { stopped_ = true; }

 private:
  struct Scheduled {
    uint64_t t_ns;
    uint64_t order;
    Event fn;
    bool operator>(const Scheduled& o) const {
      return t_ns != o.t_ns ? t_ns > o.t_ns : order > o.order;
    }
  };
  std::priority_queue<Scheduled, std::vector<Scheduled>, std::greater<>> queue_;
  // Every's repeating events (each copy scheduled holds the function).
  std::vector<std::shared_ptr<std::function<void()>>> ticks_;
  uint64_t now_ns_ = 0;
  uint64_t next_order_ = 0;
  uint64_t events_run_ = 0;
  bool stopped_ = false;
};

}  // namespace sroute::sim

#endif  // SROUTE_SIM_ENGINE_H_

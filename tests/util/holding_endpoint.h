// SPDX-License-Identifier: Apache-2.0
// HoldingEndpoint: a test endpoint that completes every IO at once (as if
// all its bytes moved) or, while holding, keeps them until Release(): an IO
// stuck downstream, for tests of quiesce, drain and the update protocol.
#ifndef SROUTE_TESTS_UTIL_HOLDING_ENDPOINT_H_
#define SROUTE_TESTS_UTIL_HOLDING_ENDPOINT_H_

#include <string_view>
#include <vector>

#include "sswitch/endpoint.h"
#include "util/mutex.h"

namespace sroute::testing {

class HoldingEndpoint : public Endpoint {
 public:
  explicit HoldingEndpoint(bool hold = false) : hold_(hold) {}

  void Submit(Io* io, std::string_view) override {
    {
      MutexLock l(&mu_);
      if (hold_) {
        held_.push_back(io);
        cv_.SignalAll();
        return;
      }
    }
    io->bytes = io->header.length;
    io->Complete();
  }
  void set_hold(bool on) {
    MutexLock l(&mu_);
    hold_ = on;
  }
  // Waits until an IO is held.
  void WaitHeld() {
    MutexLock l(&mu_);
    while (held_.empty()) cv_.Wait(&mu_);
  }
  // Completes the IOs held (as failing nothing and moving nothing).
  void Release() {
    std::vector<Io*> out;
    {
      MutexLock l(&mu_);
      out.swap(held_);
    }
    for (Io* io : out) io->Complete();
  }

 private:
  Mutex mu_;
  CondVar cv_;  // an IO was held
  bool hold_ ABSL_GUARDED_BY(mu_);
  std::vector<Io*> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_HOLDING_ENDPOINT_H_

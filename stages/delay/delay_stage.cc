// SPDX-License-Identifier: Apache-2.0
#include "stages/delay/delay_stage.h"

#include <atomic>
#include <chrono>
#include <queue>
#include <thread>
#include <vector>

#include "util/mutex.h"

namespace sroute {
namespace {

constexpr uint32_t kMaxDelayUs = 10'000'000;

class DelayStage : public HostStage {
 public:
  explicit DelayStage(proto::StageConfig config) : config_(std::move(config)) {
    delay_us_.store(config_.delay().delay_us());
  }
  ~DelayStage() override { StopTimer(); }

  void Submit(Io* io, const Forward& forward) override {
    ios_.fetch_add(1, std::memory_order_relaxed);
    const uint32_t us = delay_us_.load(std::memory_order_relaxed);
    if (us == 0) {
      forward(io);
      return;
    }
    const auto due =
        std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    MutexLock l(&mu_);
    if (!timer_.joinable()) timer_ = std::thread([this] { RunTimer(); });
    waiting_.push(Waiting{due, io, &forward});
    wake_.Signal();
  }

  proto::StageConfig config() const override {
    MutexLock l(&mu_);
    return config_;
  }

  absl::Status Reconfigure(const proto::StageConfig& next) override {
    if (next.delay().delay_us() > kMaxDelayUs) {
      return absl::InvalidArgumentError("delay_us is above 10 s");
    }
    MutexLock l(&mu_);
    config_ = next;
    delay_us_.store(next.delay().delay_us());
    return absl::OkStatus();
  }

  void Report(proto::StageStats* out) const override {
    (*out->mutable_counters())["delayed"] =
        static_cast<int64_t>(ios_.load(std::memory_order_relaxed));
  }

  absl::Status Stop() override {
    StopTimer();
    return absl::OkStatus();
  }

 private:
  struct Waiting {
    std::chrono::steady_clock::time_point due;
    Io* io;
    const Forward* forward;  // the sSwitch's, alive while the IO is
    bool operator>(const Waiting& o) const { return due > o.due; }
  };

  void RunTimer() {
    MutexLock l(&mu_);
    while (!stopping_ || !waiting_.empty()) {
      if (waiting_.empty()) {
        wake_.Wait(&mu_);
        continue;
      }
      const Waiting next = waiting_.top();
      if (std::chrono::steady_clock::now() < next.due) {
        wake_.WaitUntil(&mu_, next.due);
        continue;
      }
      waiting_.pop();
      mu_.Unlock();
      (*next.forward)(next.io);
      mu_.Lock();
    }
  }

  void StopTimer() {
    std::thread t;
    {
      MutexLock l(&mu_);
      stopping_ = true;
      wake_.Signal();
      t = std::move(timer_);
    }
    if (t.joinable()) t.join();
  }

  mutable Mutex mu_;
  proto::StageConfig config_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint32_t> delay_us_{0};
  std::atomic<uint64_t> ios_{0};
  std::priority_queue<Waiting, std::vector<Waiting>, std::greater<>> waiting_
      ABSL_GUARDED_BY(mu_);
  CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void RegisterDelayStage(StageRegistry& registry) {
  (void)registry.Register(
      "delay",
      [](const proto::StageConfig& config,
         const StageEnv&) -> absl::StatusOr<std::shared_ptr<HostStage>> {
        if (config.delay().delay_us() > kMaxDelayUs) {
          return absl::InvalidArgumentError("delay_us is above 10 s");
        }
        return std::make_shared<DelayStage>(config);
      });
}

}  // namespace sroute

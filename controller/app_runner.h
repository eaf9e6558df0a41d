// SPDX-License-Identifier: Apache-2.0
// AppRunner: one control application of the controller's own process on a
// thread of its own (internal to controller/; Controller::Impl::Apps()
// lists them).
#ifndef SROUTE_CONTROLLER_APP_RUNNER_H_
#define SROUTE_CONTROLLER_APP_RUNNER_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "controller/controller_impl.h"
#include "util/log.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

// One control application on a thread of its own: Start, then stats,
// headers and timers, one at a time.
class AppRunner {
 public:
  AppRunner(Controller::Impl* impl, std::string name, std::string args,
            bool from_command_line, std::unique_ptr<ControlApp> app)
      : name_(std::move(name)),
        args_(std::move(args)),
        from_command_line_(from_command_line),
        app_(std::move(app)),
        api_(impl, name_, this),
        thread_([this] { Loop(); }) {
    Post([this] {
      absl::Status s = app_->Start(api_);
      if (!s.ok()) {
        LogError("app ", name_, " failed to start: ", s.message());
        {
          MutexLock l(&mu_);
          failure_ = std::string(s.message());
        }
        failed_ = true;
      } else {
        LogInfo("app ", name_, " started");
      }
    });
  }
  ~AppRunner() { Stop(); }

  const std::string& name() const { return name_; }
  const std::string& args() const { return args_; }
  bool from_command_line() const { return from_command_line_; }
  // "running", or "failed: WHY".
  std::string state() ABSL_LOCKS_EXCLUDED(mu_) {
    if (!failed_) return "running";
    MutexLock l(&mu_);
    return "failed: " + failure_;
  }

  // Ends the app's thread (its calls into the controller end with it); the
  // runner stays usable: events delivered afterwards are dropped and turns
  // pass straight on. The controller stops every app before it stops the
  // threads that deliver to them, and destroys them after those are gone.
  // REQUIRES: not called from the app's own thread.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock l(&mu_);
      stop_ = true;
    }
    stopped_.store(true);
    cv_.SignalAll();
    if (thread_.joinable()) thread_.join();
  }

  void Post(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      MutexLock l(&mu_);
      if (stop_) return;
      if (tasks_.size() > 10000) return;  // a stuck app loses events
      tasks_.push_back(std::move(fn));
    }
    cv_.SignalAll();
  }
  void OnStats(const StatsSnapshot& s) {
    Post([this, s] {
      if (!failed_) app_->OnStats(s);
    });
  }
  void OnHeader(const HeaderEvent& e) {
    Post([this, e] {
      if (!failed_) app_->OnHeader(e);
    });
  }
  // On the caller's thread (ControlApp::OnIoTurn).
  void OnIoTurn(const HeaderEvent& e, std::function<void()> go) {
    if (failed_ || stopped_.load()) {
      go();
    } else {
      app_->OnIoTurn(e, std::move(go));
    }
  }
  // An administrator's request (ControlApp::OnCall), answered on the app's
  // thread after what is queued there; Unavailable when it does not answer
  // within `timeout`.
  absl::StatusOr<proto::AppAnswer> Call(const proto::AppCall& call,
                                        absl::Duration timeout) {
    if (failed_) {
      return absl::FailedPreconditionError(
          StrCat("app ", name_, " takes no requests: ", state()));
    }
    struct Pending {
      Mutex mu;
      CondVar done;
      std::optional<absl::StatusOr<proto::AppAnswer>> answer
          ABSL_GUARDED_BY(mu);
    };
    auto pending = std::make_shared<Pending>();
    Post([this, pending, call] {
      absl::StatusOr<proto::AppAnswer> answer = app_->OnCall(call);
      MutexLock l(&pending->mu);
      pending->answer = std::move(answer);
      pending->done.SignalAll();
    });
    MutexLock l(&pending->mu);
    if (!pending->done.WaitFor(&pending->mu, absl::ToChronoNanoseconds(timeout),
                               [&]()
                                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(pending->mu) {
                                     return pending->answer.has_value();
                                   })) {
      return absl::UnavailableError(
          StrCat("app ", name_, " did not answer within ",
                 absl::FormatDuration(timeout), " (busy, or stopping)"));
    }
    return *std::move(pending->answer);
  }
  void AddTimer(absl::Duration period, std::function<void()> fn) {
    MutexLock l(&mu_);
    timers_.push_back(Timer{std::max(period, absl::Milliseconds(1)),
                            absl::Now() + period, std::move(fn)});
    cv_.SignalAll();
  }

 private:
  struct Timer {
    absl::Duration period;
    absl::Time next;
    std::function<void()> fn;
  };

  void Loop() ABSL_LOCKS_EXCLUDED(mu_) {
    ReleasableMutexLock l(&mu_);
    while (!stop_) {
      absl::Time wake = absl::InfiniteFuture();
      for (const Timer& t : timers_) wake = std::min(wake, t.next);
      if (tasks_.empty()) {
        if (wake == absl::InfiniteFuture()) {
          cv_.Wait(&mu_);
        } else {
          cv_.WaitFor(&mu_,
                      std::chrono::nanoseconds(std::max<int64_t>(
                          0, absl::ToInt64Nanoseconds(wake - absl::Now()))));
        }
        if (stop_) break;
      }
      std::vector<std::function<void()>> run;
      run.swap(tasks_);
      const absl::Time now = absl::Now();
      for (Timer& t : timers_) {
        if (t.next <= now && !failed_) {
          run.push_back(t.fn);
          t.next = now + t.period;
        }
      }
      l.Unlock();
      for (auto& fn : run) fn();
      l.Lock();
    }
  }

  const std::string name_;
  const std::string args_;
  const bool from_command_line_;
  std::unique_ptr<ControlApp> app_;
  LocalApi api_;
  // Guards tasks_, timers_, stop_, failure_. A leaf: tasks and timers run
  // without it.
  Mutex mu_;
  std::string failure_ ABSL_GUARDED_BY(mu_);
  CondVar cv_;
  std::vector<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  std::vector<Timer> timers_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> failed_{false};
  std::atomic<bool> stopped_{false};
  std::thread thread_;  // last: starts after everything above
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_APP_RUNNER_H_

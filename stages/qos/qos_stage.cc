// SPDX-License-Identifier: Apache-2.0
#include "stages/qos/qos_stage.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sswitch/io.h"
#include "stages/qos/device_curve.h"
#include "stages/qos/token_scheduler.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(StrCat("qos: ", what));
}

// The scheduler's view of a QosOptions.
struct Settings {
  QosDeviceParams device;
  std::vector<QosTenantSpec> tenants;
  bool by_rule = false;
};

absl::StatusOr<Settings> SettingsOf(const proto::QosOptions& o) {
  Settings s;
  s.device.tokens_per_s = static_cast<double>(o.tokens_per_s());
  if (o.has_write_cost()) {
    if (o.write_cost() < 1 || o.write_cost() > 1000) {
      return Bad(StrCat("write_cost ", o.write_cost(), " is not in 1..1000"));
    }
    s.device.write_cost = o.write_cost();
  }
  s.device.read_only_discount = o.read_only_discount();
  if (o.has_read_only_percent()) {
    if (o.read_only_percent() < 1 || o.read_only_percent() > 100) {
      return Bad(StrCat("read_only_percent ", o.read_only_percent(),
                        " is not in 1..100"));
    }
    s.device.read_only_read_cost = o.read_only_percent() / 100.0;
  }
  if (o.has_deficit_floor()) {
    s.device.deficit_floor = -static_cast<double>(o.deficit_floor());
  }
  if (o.by().empty() || o.by() == "tenant") {
    s.by_rule = false;
  } else if (o.by() == "rule") {
    s.by_rule = true;
  } else {
    return Bad(StrCat("by '", o.by(), "' is not tenant or rule"));
  }
  std::set<std::string> names;
  for (const proto::QosOptions::Tenant& t : o.tenant()) {
    if (t.name().empty()) return Bad("a tenant without a name");
    if (!names.insert(t.name()).second) {
      return Bad(StrCat("tenant ", t.name(), " is given twice"));
    }
    QosTenantSpec spec;
    spec.name = t.name();
    if (t.qos_class() == "lc") {
      spec.cls = QosClass::kLatencyCritical;
      if (t.iops() == 0) {
        return Bad(StrCat("tenant ", t.name(),
                          ": a latency-critical tenant needs iops"));
      }
      const uint32_t reads = t.has_read_percent() ? t.read_percent() : 100;
      if (reads > 100) {
        return Bad(StrCat("tenant ", t.name(), ": read_percent ", reads,
                          " is above 100"));
      }
      spec.reserved_iops = t.iops();
      spec.read_fraction = reads / 100.0;
      spec.p95_slo = absl::Microseconds(t.p95_us());
    } else if (t.qos_class().empty() || t.qos_class() == "be") {
      spec.cls = QosClass::kBestEffort;
    } else {
      return Bad(StrCat("tenant ", t.name(), ": class '", t.qos_class(),
                        "' is not lc or be"));
    }
    if (absl::Status st = TokenScheduler::CheckTenant(spec); !st.ok()) {
      return Bad(StrCat("tenant ", t.name(), ": ", st.message()));
    }
    s.tenants.push_back(std::move(spec));
  }
  const std::vector<QosCurvePoint> curve = CurveOf(o);
  if (absl::Status st = CheckCurve(curve); !st.ok()) {
    return Bad(std::string(st.message()));
  }
  if (o.tokens_per_s() == 0 && !curve.empty()) {
    // The rate at the strictest target (no LC tenant: nothing to keep).
    absl::Duration strictest = absl::InfiniteDuration();
    for (const QosTenantSpec& t : s.tenants) {
      if (t.cls == QosClass::kLatencyCritical &&
          t.p95_slo > absl::ZeroDuration()) {
        strictest = std::min(strictest, t.p95_slo);
      }
    }
    const CurveRate rate = RateAt(curve, strictest);
    s.device.tokens_per_s = rate.tokens_per_s;
    if (!o.has_read_only_percent() && rate.read_only_tokens_per_s > 0) {
      s.device.read_only_read_cost = std::clamp(
          rate.tokens_per_s / rate.read_only_tokens_per_s, 0.01, 1.0);
    }
  }
  if (absl::Status st = TokenScheduler::CheckDevice(s.device); !st.ok()) {
    return Bad(std::string(st.message()));
  }
  return s;
}

QosOp OpOf(Op op) {
  switch (op) {
    case Op::kRead:
      return QosOp::kRead;
    case Op::kWrite:
      return QosOp::kWrite;
    default:
      return QosOp::kOther;
  }
}

// A monotonic clock as absl::Time (the scheduler only compares and
// subtracts): a wall-clock step must not stall or burst the queues.
absl::Time Now() {
  return absl::UnixEpoch() +
         absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

class QosStage : public HostStage {
 public:
  QosStage(proto::StageConfig config, Settings settings)
      : config_(std::move(config)) {
    MutexLock l(&mu_);
    Apply(settings, Now());
  }
  ~QosStage() override { StopDispatcher(); }

  void Submit(Io* io, const Forward& forward) override {
    const absl::Time now = Now();
    auto* waiting = new Waiting{io, &forward, now, OpOf(io->header.op), ""};
    std::vector<QosRequest> go;
    {
      MutexLock l(&mu_);
      waiting->tenant =
          by_rule_ ? std::to_string(io->rule_id()) : io->header.source;
      scheduler_.Enqueue(
          waiting->tenant,
          {reinterpret_cast<uint64_t>(waiting), waiting->op, io->header.length},
          now);
      scheduler_.Schedule(now, &go);
      if (scheduler_.queued() > 0) {
        // The others wait for tokens: the dispatcher wakes for them.
        if (!dispatcher_.joinable()) {
          dispatcher_ = std::thread([this] { RunDispatcher(); });
        }
        wake_.Signal();
      }
    }
    Dispatch(go);
  }

  proto::StageConfig config() const override {
    MutexLock l(&mu_);
    return config_;
  }

  bool ReconfiguresLive(const proto::StageConfig&) const override {
    return true;
  }

  absl::Status Reconfigure(const proto::StageConfig& next) override {
    auto settings = SettingsOf(next.qos());
    if (!settings.ok()) return settings.status();
    MutexLock l(&mu_);
    Apply(*settings, Now());
    config_ = next;
    wake_.Signal();
    return absl::OkStatus();
  }

  void Report(proto::StageStats* out) const override {
    const absl::Time now = Now();
    MutexLock l(&mu_);
    auto& c = *out->mutable_counters();
    const QosDeviceStats d = scheduler_.DeviceStats();
    c["tokens_per_s"] = std::llround(d.tokens_per_s);
    c["lc_reserved_tokens_per_s"] = std::llround(d.lc_reserved_rate);
    c["limited"] = d.limited ? 1 : 0;
    c["queued"] = static_cast<int64_t>(scheduler_.queued());
    c["be_rounds"] = static_cast<int64_t>(d.be_rounds);
    for (const QosTenantStats& t : scheduler_.AllStats(now)) {
      const std::string& n = t.name;
      c[n + ".lc"] = t.cls == QosClass::kLatencyCritical ? 1 : 0;
      c[n + ".iops"] = std::llround(t.iops);
      c[n + ".p50_us"] = absl::ToInt64Microseconds(t.p50);
      c[n + ".p95_us"] = absl::ToInt64Microseconds(t.p95);
      c[n + ".p99_us"] = absl::ToInt64Microseconds(t.p99);
      c[n + ".tokens"] = std::llround(t.tokens);
      c[n + ".token_rate"] = std::llround(t.token_rate);
      c[n + ".deficit_floor_hits"] = static_cast<int64_t>(t.deficit_floor_hits);
      c[n + ".queued"] = static_cast<int64_t>(t.queued);
      c[n + ".arrived"] = static_cast<int64_t>(t.enqueued);
      c[n + ".dispatched"] = static_cast<int64_t>(t.dispatched);
      c[n + ".completed"] = static_cast<int64_t>(t.completed);
      c[n + ".bytes_read"] = static_cast<int64_t>(t.bytes_read);
      c[n + ".bytes_written"] = static_cast<int64_t>(t.bytes_written);
    }
  }

  absl::Status Stop() override {
    StopDispatcher();
    return absl::OkStatus();
  }

 private:
  // An IO in the stage until it is handed on: the scheduler's cookie.
  struct Waiting {
    Io* io;
    const Forward* forward;  // the sSwitch's, alive while the IO is
    absl::Time arrived;
    QosOp op;
    std::string tenant;
  };

  // The configured tenants replace those of the last options (tenants
  // only seen in IOs stay, best effort).
  void Apply(const Settings& s, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Checked by SettingsOf: the scheduler takes them.
    (void)scheduler_.SetDevice(s.device, now);
    std::set<std::string> named;
    for (const QosTenantSpec& t : s.tenants) {
      (void)scheduler_.SetTenant(t, now);
      named.insert(t.name);
    }
    for (const std::string& old : configured_) {
      if (named.count(old) == 0) {
        QosTenantSpec be;
        be.name = old;
        (void)scheduler_.SetTenant(be, now);
      }
    }
    configured_ = std::move(named);
    by_rule_ = s.by_rule;
  }

  // Hands on the requests the scheduler let go, in order, each with a
  // response hook that reports its completion.
  void Dispatch(const std::vector<QosRequest>& go) {
    for (const QosRequest& r : go) {
      std::unique_ptr<Waiting> w(reinterpret_cast<Waiting*>(r.cookie));
      w->io->AddResponseHook([this, tenant = w->tenant, op = w->op,
                              arrived = w->arrived](Io& done) {
        const absl::Time now = Now();
        const uint64_t bytes = done.status.ok() ? done.bytes : 0;
        MutexLock l(&mu_);
        scheduler_.Complete(tenant, op, bytes, now - arrived, now);
        // Tokens may have come: the dispatcher looks (not this thread,
        // which may be deep in another IO's completion).
        if (scheduler_.queued() > 0) wake_.Signal();
      });
      (*w->forward)(w->io);
    }
  }

  void RunDispatcher() {
    std::vector<QosRequest> go;
    MutexLock l(&mu_);
    while (!stopping_) {
      const absl::Time now = Now();
      scheduler_.Schedule(now, &go);
      if (!go.empty()) {
        mu_.Unlock();
        Dispatch(go);
        go.clear();
        mu_.Lock();
        continue;
      }
      const absl::Time next = scheduler_.NextWake(now);
      if (next == absl::InfiniteFuture()) {
        wake_.Wait(&mu_);
      } else {
        wake_.WaitUntil(
            &mu_, std::chrono::steady_clock::time_point(
                      absl::ToChronoNanoseconds(next - absl::UnixEpoch())));
      }
    }
  }

  void StopDispatcher() {
    std::thread t;
    {
      MutexLock l(&mu_);
      stopping_ = true;
      wake_.Signal();
      t = std::move(dispatcher_);
    }
    if (t.joinable()) t.join();
  }

  mutable Mutex mu_;  // a leaf: no call out of the stage holds it
  proto::StageConfig config_ ABSL_GUARDED_BY(mu_);
  TokenScheduler scheduler_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> configured_ ABSL_GUARDED_BY(mu_);
  bool by_rule_ ABSL_GUARDED_BY(mu_) = false;
  CondVar wake_;  // requests queued, options changed, or stopping
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread dispatcher_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void RegisterQosStage(StageRegistry& registry) {
  (void)registry.Register(
      "qos",
      [](const proto::StageConfig& config,
         const StageEnv&) -> absl::StatusOr<std::shared_ptr<HostStage>> {
        auto settings = SettingsOf(config.qos());
        if (!settings.ok()) return settings.status();
        return std::make_shared<QosStage>(config, *std::move(settings));
      });
}

}  // namespace sroute

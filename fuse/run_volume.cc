// SPDX-License-Identifier: Apache-2.0
#include "fuse/run_volume.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>
#include <vector>

#include "fuse/session_loop.h"
#include "fuse/tenant_map.h"
#include "fuse/uring_queues.h"
#include "fuse/volume.h"
#include "host/detach.h"
#include "host/flags.h"
#include "host/runtime.h"
#include "metrics/exposition.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

// Like mergerfs: the daemon's threads run ahead of its callers, so when
// callers keep every CPU busy a woken worker does not wait its turn.
constexpr int kDefaultNice = -10;

int Fail(std::string_view msg) {
  std::cerr << "sroute-fuse: " << msg << "\n";
  return 1;
}
int Fail(const absl::Status& s) { return Fail(std::string(s.message())); }

// True when `path` is a mount point already (its device differs from its
// parent's).
bool IsMountPoint(const std::string& path) {
  struct stat self {
  }, parent{};
  if (stat(path.c_str(), &self) != 0) return false;
  if (stat((path + "/..").c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev || self.st_ino == parent.st_ino;
}

std::string DefaultName(const std::string& mountpoint) {
  char hostname[256] = "localhost";
  gethostname(hostname, sizeof(hostname) - 1);
  std::error_code ec;
  const auto abs = std::filesystem::absolute(mountpoint, ec);
  return std::string("fuse@") + hostname + ":" +
         (ec ? mountpoint : abs.lexically_normal().string());
}

}  // namespace

void AddVolumeFlags(CLI::App* app, proto::HostConfig* o, MountRequest* m) {
  app->add_option("MOUNTPOINT", m->mountpoint, "where to mount")->required();
  app->add_option_function<std::string>(
      "--backing", [o](const std::string& v) { o->set_backing(v); },
      "directory (or storage server HOST:PORT) holding the volume's "
      "namespace (endpoint 'home')");
  app->add_option_function<std::string>(
      "--state", [o](const std::string& v) { o->set_state_dir(v); },
      "durable state directory (a replica set's dirty-region log) "
      "[BACKING/.sroute/state for a local backing]");
  AddParsedFlag(
      app, "--tenant", ParseTenantSpec,
      [o](proto::HostConfig::Tenant t) { *o->add_tenant() = std::move(t); },
      "name callers for rules: NAME=uid:N, NAME=gid:N or NAME=cgroup:/PATH "
      "(a cgroup v2 path and those beneath it; repeatable; others are "
      "uid:N)");
  app->add_option_function<std::string>(
         "--kernel-cache",
         [o](const std::string& v) { o->set_kernel_cache(v); },
         "off: every read and write reaches the router; auto: the kernel may "
         "cache [auto]")
      ->check(CLI::IsMember({"off", "auto"}));
  app->add_option_function<std::string>(
         "--passthrough", [o](const std::string& v) { o->set_passthrough(v); },
         "auto: the kernel serves files nothing routes, taps, quiesces or "
         "watches from their backing files itself (Linux 6.9+, a local "
         "backing directory, root); off: every IO through the daemon [off]")
      ->check(CLI::IsMember({"off", "auto"}));
  app->add_option_function<uint32_t>(
         "--passthrough-wait-ms",
         [o](uint32_t v) { o->set_passthrough_wait_ms(v); },
         "how long a rule change naming a file open with passthrough waits "
         "for it to close before failing [5000]")
      ->check(CLI::Range(0, 3600000));
  app->add_option_function<uint32_t>(
         "--threads", [o](uint32_t v) { o->set_threads(v); },
         "threads serving FUSE requests (more are added while all of them "
         "are stuck on slow requests) [CPUs, at least 2]")
      ->check(CLI::Range(1, 1024));
  app->add_option_function<int32_t>(
         "--nice", [o](int32_t v) { o->set_nice(v); },
         "scheduling priority of the daemon's threads (-20..19); below its "
         "callers', a request is served as soon as it arrives instead of "
         "after the caller's time slice [-10]")
      ->check(CLI::Range(-20, 19));
  // FUSE over io_uring keeps each request on its caller's CPU (see
  // fuse/uring_queues.h); used whenever the kernel offers it.
  app->add_option_function<std::string>(
         "--io-uring",
         [o](const std::string& v) {
           if (v == "auto") {
             o->clear_io_uring();
           } else {
             o->set_io_uring(v != "off");
           }
         },
         "take requests from per-CPU io_uring queues: auto (when the kernel "
         "offers them: Linux 6.14+ with "
         "/sys/module/fuse/parameters/enable_uring set to Y), on (refuse to "
         "start without them; also --io-uring alone), off (/dev/fuse) [auto]")
      ->expected(0, 1)
      ->default_str("on")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app->add_flag("-f,--foreground", m->foreground, "stay in the foreground");
  app->add_flag("-d,--debug", m->debug,
                "print every FUSE request (implies -f)");
  app->add_option_function<std::string>(
      "-o", [o](const std::string& v) { o->add_fuse_option(v); },
      "FUSE mount options, comma-separated");
}

namespace {

// Before any thread starts: threads take their priority from the thread
// that creates them. Failing to get the default is only logged.
absl::Status SetNice(const proto::HostConfig& config) {
  const int nice_value = config.has_nice() ? config.nice() : kDefaultNice;
  if (setpriority(PRIO_PROCESS, 0, nice_value) == 0) return absl::OkStatus();
  const std::string why = std::strerror(errno);
  if (config.has_nice()) {
    return absl::PermissionDeniedError(
        StrCat("cannot run at nice ", nice_value, ": ", why,
               " (lowering the nice value needs CAP_SYS_NICE or "
               "RLIMIT_NICE)"));
  }
  LogInfo("running at nice ", getpriority(PRIO_PROCESS, 0), ", not ",
          nice_value, ": ", why);
  return absl::OkStatus();
}

absl::StatusOr<VolumeOptions> VolumeOptionsOf(const proto::HostConfig& c) {
  VolumeOptions options;
  for (const auto& t : c.tenant()) {
    if (absl::Status s = options.tenants.Add(t); !s.ok()) return s;
  }
  options.kernel_cache = c.kernel_cache() == "off"
                             ? VolumeOptions::KernelCache::kOff
                             : VolumeOptions::KernelCache::kAuto;
  options.passthrough = c.passthrough() == "auto";
  if (c.has_passthrough_wait_ms()) {
    options.passthrough_wait = absl::Milliseconds(c.passthrough_wait_ms());
  }
  return options;
}

// What the session loop counts, shown as gauges in stats.
struct LoopCounters {
  std::atomic<uint64_t> interrupts_refused{0};  // answered ENOSYS
  UringStats uring;
  FuseRequestCounts requests;
};

// The FUSE front end's metrics, beside the sSwitch's (host/host_metrics.h).
void AddFuseMetrics(Volume& volume, const LoopCounters& counters,
                    metrics::Exposition* out) {
  using metrics::MetricType;
  auto& requests =
      out->Declare("sroute_fuse_requests_total", MetricType::kCounter,
                   "FUSE requests received, by opcode");
  for (size_t slot = 0; slot < kFuseOpSlots; ++slot) {
    const std::string_view name = FuseOpSlotName(slot);
    const uint64_t n = counters.requests.Read(slot);
    // Every opcode the kernel has, seen or not, so that rates start at 0.
    if (!name.empty()) {
      requests.Add({{"op", std::string(name)}}, static_cast<double>(n));
    }
  }
  auto counter = [out](const char* name, const char* help, uint64_t v) {
    out->Declare(name, MetricType::kCounter, help)
        .Add({}, static_cast<double>(v));
  };
  auto gauge = [out](const char* name, const char* help, uint64_t v) {
    out->Declare(name, MetricType::kGauge, help)
        .Add({}, static_cast<double>(v));
  };
  gauge("sroute_fuse_inodes", "Inodes the kernel holds a reference to",
        volume.inodes().size());
  gauge("sroute_fuse_pending_invalidations",
        "Kernel cache invalidations not sent yet",
        volume.pending_invalidations());
  if (const PassthroughFiles* pt = volume.passthrough()) {
    const PassthroughFiles::Counters c = pt->counters();
    counter("sroute_fuse_passthrough_opens_total",
            "Opens the kernel serves from the backing file (passthrough)",
            c.opens);
    gauge("sroute_fuse_passthrough_files_open",
          "Files open with kernel passthrough now", c.files_open);
    auto& not_past = out->Declare(
        "sroute_fuse_passthrough_refused_total", MetricType::kCounter,
        "Opens that went through the daemon with passthrough on, by reason");
    for (const auto& [why, n] : c.not_why) {
      not_past.Add({{"reason", why}}, static_cast<double>(n));
    }
  }
  counter("sroute_fuse_interrupts_refused_total",
          "Interrupts answered with ENOSYS",
          counters.interrupts_refused.load());
  counter("sroute_fuse_uring_requests_total",
          "FUSE requests served on io_uring queues",
          counters.uring.requests.load());
  counter("sroute_fuse_uring_boosts_total",
          "Times a starved io_uring queue thread ran at normal priority",
          counters.uring.boosts.load());
  counter("sroute_fuse_helper_calls_total",
          "Calls io_uring queue threads handed to helpers",
          counters.uring.helper_calls.load());
  gauge("sroute_fuse_helper_threads", "Helper threads alive",
        counters.uring.helper_threads.load());
  gauge("sroute_fuse_helper_busy", "Helper threads in a call",
        counters.uring.helper_busy.load());
}

void AddGauges(Volume& volume, const LoopCounters& counters,
               proto::ControlResponse* resp) {
  auto& gauges = *resp->mutable_gauges();
  gauges["fuse_inodes"] = static_cast<int64_t>(volume.inodes().size());
  gauges["fuse_interrupts_refused"] =
      static_cast<int64_t>(counters.interrupts_refused.load());
  gauges["fuse_uring_requests"] =
      static_cast<int64_t>(counters.uring.requests.load());
  gauges["fuse_uring_boosts"] =
      static_cast<int64_t>(counters.uring.boosts.load());
  gauges["fuse_uring_helper_calls"] =
      static_cast<int64_t>(counters.uring.helper_calls.load());
  gauges["fuse_uring_helper_threads"] =
      static_cast<int64_t>(counters.uring.helper_threads.load());
  gauges["fuse_uring_helper_busy"] =
      static_cast<int64_t>(counters.uring.helper_busy.load());
  gauges["fuse_pending_invalidations"] =
      static_cast<int64_t>(volume.pending_invalidations());
  if (const PassthroughFiles* pt = volume.passthrough()) {
    const PassthroughFiles::Counters c = pt->counters();
    gauges["fuse_passthrough_opens"] = static_cast<int64_t>(c.opens);
    gauges["fuse_passthrough_files_open"] = static_cast<int64_t>(c.files_open);
    // Why opens went through the daemon, by reason.
    for (const auto& [why, n] : c.not_why) {
      gauges["fuse_passthrough_not: " + why] = static_cast<int64_t>(n);
    }
  }
}

// A FUSE session mounted on the mount point; unmounted and destroyed with
// the object.
class MountedSession {
 public:
  static absl::StatusOr<std::unique_ptr<MountedSession>> Mount(
      Volume& volume, const proto::HostConfig& config,
      const MountRequest& mount) {
    std::unique_ptr<MountedSession> m(new MountedSession);
    m->args_ = {"sroute-fuse", "-o",
                "fsname=sroute,subtype=sroute,default_permissions,allow_other"};
    for (const std::string& o : config.fuse_option()) {
      m->args_.insert(m->args_.end(), {"-o", o});
    }
    if (mount.debug) m->args_.push_back("-d");
    for (std::string& a : m->args_) m->argv_.push_back(a.data());
    m->fuse_args_ =
        FUSE_ARGS_INIT(static_cast<int>(m->argv_.size()), m->argv_.data());
    m->se_ = fuse_session_new(&m->fuse_args_, &volume.ops(),
                              sizeof(volume.ops()), &volume);
    if (m->se_ == nullptr)
      return absl::InvalidArgumentError("bad FUSE options");
    if (fuse_session_mount(m->se_, mount.mountpoint.c_str()) != 0) {
      return absl::UnavailableError("cannot mount on " + mount.mountpoint);
    }
    m->mounted_ = true;
    return m;
  }
  ~MountedSession() {
    if (mounted_) fuse_session_unmount(se_);
    if (se_ != nullptr) fuse_session_destroy(se_);
    fuse_opt_free_args(&fuse_args_);
  }
  fuse_session* get() { return se_; }

 private:
  MountedSession() = default;
  std::vector<std::string> args_;
  std::vector<char*> argv_;
  fuse_args fuse_args_ = FUSE_ARGS_INIT(0, nullptr);
  fuse_session* se_ = nullptr;
  bool mounted_ = false;
};

// Whether to ask the kernel for io_uring queues; says why not if it is
// left to the kernel (auto) and the kernel cannot.
bool UringWanted(const proto::HostConfig& config) {
  if (config.has_io_uring()) return config.io_uring();
  const std::string why = UringUnavailableReason();
  if (why.empty()) return true;
  LogInfo("FUSE requests through /dev/fuse, not io_uring queues: ", why,
          " (--io-uring=off says so and skips this check)");
  return false;
}

SessionLoopOptions LoopOptions(const proto::HostConfig& config,
                               const MountRequest& mount, Volume& volume,
                               LoopCounters& counters) {
  SessionLoopOptions loop;
  loop.workers =
      config.threads() != 0
          ? static_cast<int>(config.threads())
          : static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  // -d prints every request as libfuse parses it: let it see them all.
  if (!mount.debug) {
    loop.raw_handler = [&volume](fuse_session* s, const RawRequest& r) {
      return volume.ServeRaw(s, r);
    };
  }
  loop.interrupts_refused = &counters.interrupts_refused;
  loop.request_counts = &counters.requests;
  loop.poll_window = std::chrono::microseconds(config.poll_us());
  loop.io_uring = UringWanted(config);
  loop.io_uring_required = config.has_io_uring() && config.io_uring();
  loop.uring_stats = &counters.uring;
  loop.passthrough = volume.options().passthrough;
  return loop;
}

}  // namespace

int RunVolume(proto::HostConfig config, const MountRequest& mount) {
  if (config.has_io_uring() && config.io_uring()) {
    const std::string why = UringUnavailableReason();
    if (!why.empty()) return Fail("--io-uring=on: " + why);
  }
  if (config.backing().empty()) {
    return Fail(
        "no backing directory: give --backing DIR or backing: in --config");
  }
  if (IsMountPoint(mount.mountpoint)) {
    return Fail("mount point " + mount.mountpoint +
                " is in use (already mounted)");
  }
  if (config.name().empty()) config.set_name(DefaultName(mount.mountpoint));
  SetLogTag("sroute-fuse");
  if (absl::Status s = SetNice(config); !s.ok()) return Fail(s);
  Detacher detacher;
  if (!mount.foreground && !mount.debug) {
    if (absl::Status s = detacher.Detach(); !s.ok()) return Fail(s);
  }
  auto built = HostRuntime::Build(config, HostKind::kFuse);
  if (!built.ok()) return Fail(built.status());
  HostRuntime& rt = **built;
  auto options = VolumeOptionsOf(config);
  if (!options.ok()) return Fail(options.status());
  Volume volume(&rt.sswitch(), *std::move(options));
  // With a controller, its rules (and the delegate-made rules recovered from
  // the servers) are in place before the volume serves its first IO.
  if (absl::Status s = rt.StartAgent(); !s.ok()) return Fail(s);
  LoopCounters counters;
  if (absl::Status s = rt.StartControl(
          [&](proto::ControlResponse* r) { AddGauges(volume, counters, r); });
      !s.ok()) {
    return Fail(s);
  }
  if (absl::Status s = rt.StartMetrics(
          [&](metrics::Exposition* e) { AddFuseMetrics(volume, counters, e); });
      !s.ok()) {
    return Fail(s);
  }
  umask(0);  // the kernel applied the caller's umask already
  auto session = MountedSession::Mount(volume, config, mount);
  if (!session.ok()) return Fail(session.status());
  fuse_session* se = (*session)->get();
  // A stop signal that came while starting (blocked until now) ends the
  // volume as soon as it serves.
  if (TakeStopSignal()) fuse_session_exit(se);
  volume.StartInvalidating(se);
  detacher.Ready();

  const int rc =
      RunSessionLoop(se, LoopOptions(config, mount, volume, counters));
  if (rc != 0) {
    LogError("serving FUSE requests on ", mount.mountpoint,
             " failed: ", std::strerror(-rc), "; unmounting");
  }
  // No control request may touch the session from here on.
  rt.StopServices();
  volume.StopInvalidating();
  // IOs on their way back from storage servers reply to the session: let
  // them finish (each within its deadline). Then the stages write back what
  // they hold (through the network threads, which stop only after), before
  // the session goes.
  bool stages_ok = true;
  if (rt.WaitForIdle(std::chrono::milliseconds(
          absl::ToInt64Milliseconds(rt.remote_timeout()) + 1000))) {
    if (absl::Status s = rt.StopStages(); !s.ok()) {
      LogError("stopping the stages: ", s.message());
      stages_ok = false;
    }
  }
  if (rt.io_threads() != nullptr) rt.io_threads()->Stop();
  session->reset();
  return rc == 0 && stages_ok ? 0 : 1;
}

}  // namespace sroute

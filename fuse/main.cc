// sroute-fuse MOUNTPOINT --backing DIR|HOST:PORT
//             [--endpoint NAME=DIR|NAME=HOST:PORT]... [--secret-file FILE]
//             [--rules FILE] [--kernel-cache off|auto] [--control SOCKET]
//             [--name NAME] [--controller HOST:PORT] [--threads N]
//             [--poll-us N] [--nice N] [-f] [-d] [-o OPTIONS]
//
// Mounts a routed volume: the namespace lives in the backing directory or
// storage server (endpoint "home"); rules may send any IO elsewhere.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "control/control_server.h"
#include "host/agent.h"
#include "fuse/config.h"
#include "fuse/session_loop.h"
#include "fuse/uring_queues.h"
#include "fuse/volume.h"
#include "rpc/handshake.h"
#include "rpc/io_threads.h"
#include "rpc/remote_endpoint.h"
#include "sswitch/host.h"
#include "util/log.h"

namespace {

// Like mergerfs: the daemon's threads run ahead of its callers, so when
// callers keep every CPU busy a woken worker does not wait its turn.
constexpr int kDefaultNice = -10;

int Die(const std::string& msg) {
  std::cerr << "sroute-fuse: " << msg << "\n";
  return 1;
}

// True when `path` is a mount point already (its device differs from its
// parent's).
bool IsMountPoint(const std::string& path) {
  struct stat self {
  }, parent{};
  if (stat(path.c_str(), &self) != 0) return false;
  if (stat((path + "/..").c_str(), &parent) != 0) return false;
  return self.st_dev != parent.st_dev || self.st_ino == parent.st_ino;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread starts, so that every thread inherits the mask. (Stop
  // signals are taken by the session loop, not by libfuse's handlers.)
  sroute::BlockStopSignals();
  signal(SIGPIPE, SIG_IGN);  // a closed socket is an error, not an exit
  CLI::App app{"sroute-fuse: a FUSE volume whose IO is routed by rules"};
  std::string mountpoint, backing, rules_file, kernel_cache = "auto", options,
                                               control_socket;
  std::vector<std::string> endpoints, tenants;
  std::string config_file, secret_file, name, controller;
  int remote_timeout_ms = 10000;
  bool foreground = false, debug = false;
  app.add_option("MOUNTPOINT", mountpoint, "where to mount")->required();
  app.add_option("--config", config_file,
                 "configuration file (protobuf text format, "
                 "proto/config.proto); flags add to it or override it");
  auto* backing_opt = app.add_option(
      "--backing", backing,
      "directory (or storage server HOST:PORT) holding the volume's "
      "namespace (endpoint 'home')");
  app.add_option("--endpoint", endpoints,
                 "more endpoints: NAME=DIR or a storage server "
                 "NAME=HOST:PORT (repeatable)");
  app.add_option("--secret-file", secret_file,
                 "the cluster secret, for storage servers");
  app.add_option("--name", name,
                 "this host's sSwitch name [fuse@HOSTNAME:MOUNTPOINT]");
  app.add_option("--controller", controller,
                 "register with the controller at HOST:PORT (its rules are "
                 "installed before the volume serves)");
  int controller_timeout_ms = 10000;
  app.add_option("--controller-timeout-ms", controller_timeout_ms,
                 "how long to wait for the controller at start")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  app.add_option("--remote-timeout-ms", remote_timeout_ms,
                 "deadline of each IO sent to a storage server")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  // FUSE workers sleep in read(2) unless asked to poll. Polling saves
  // waking a worker per request, but its reply must then wake the caller on
  // the other CPU, which where idle CPUs halt (a VM without guest halt
  // polling, as here) costs ~40 µs; the kernel's own hand-off runs the woken
  // worker on the caller's CPU instead. Small IO one at a time ran up to
  // 1.8x faster without polling here; 128 KiB reads and metadata ~1.1x
  // slower (bench/RESULTS.md).
  int poll_us = 0;
  auto* poll_us_opt =
      app.add_option("--poll-us", poll_us,
                     "after each request or reply, keep polling for FUSE "
                     "requests and storage servers' replies this many "
                     "microseconds before sleeping (costs a CPU while IO "
                     "flows; pays where waking a thread is slow) [0]")
          ->check(CLI::Range(0, 100000));
  // FUSE over io_uring keeps each request on its caller's CPU (see
  // fuse/uring_queues.h); opt-in, since the kernel's switch for it is
  // system-wide and off by default.
  bool io_uring = false;
  app.add_flag("--io-uring", io_uring,
               "take requests from per-CPU io_uring queues (Linux 6.14+, "
               "with /sys/module/fuse/parameters/enable_uring set to Y)");
  int fuse_threads =
      static_cast<int>(std::max(2u, std::thread::hardware_concurrency()));
  auto* threads_opt =
      app.add_option("--threads", fuse_threads,
                     "threads serving FUSE requests (more are added while all "
                     "of them are stuck on slow requests) [CPUs, at least 2]")
          ->check(CLI::Range(1, 1024));
  int nice_value = kDefaultNice;
  auto* nice_opt =
      app.add_option("--nice", nice_value,
                     "scheduling priority of the daemon's threads (-20..19); "
                     "below its callers', a request is served as soon as it "
                     "arrives instead of after the caller's time slice")
          ->capture_default_str()
          ->check(CLI::Range(-20, 19));
  app.add_option("--rules", rules_file, "rules file to install at start");
  app.add_option("--tenant", tenants,
                 "name callers for rules: NAME=uid:N, NAME=gid:N or "
                 "NAME=cgroup:/PATH (a cgroup v2 path and those beneath it; "
                 "repeatable; others are uid:N)");
  auto* kernel_cache_opt =
      app.add_option("--kernel-cache", kernel_cache,
                     "off: every read and write reaches the router; auto: the "
                     "kernel may cache")
          ->check(CLI::IsMember({"off", "auto"}));
  app.add_option("--control", control_socket,
                 "serve live control (sroutectl --host unix:SOCKET) on this "
                 "unix socket (mode 0600)");
  app.add_flag("-f,--foreground", foreground, "stay in the foreground");
  app.add_flag("-d,--debug", debug, "print every FUSE request (implies -f)");
  app.add_option("-o", options, "FUSE mount options, comma-separated");
  CLI11_PARSE(app, argc, argv);

  // The config file first; flags add endpoints and tenants and override the
  // rest.
  std::vector<std::string> inline_rules;
  bool nice_asked = nice_opt->count() != 0;
  if (!config_file.empty()) {
    auto config = sroute::LoadVolumeConfig(config_file);
    if (!config.ok()) return Die(std::string(config.status().message()));
    if (backing_opt->count() == 0) backing = config->backing();
    std::vector<std::string> from_config;
    for (const auto& e : config->endpoint()) {
      from_config.push_back(e.name() + "=" +
                            (e.dir().empty() ? e.server() : e.dir()));
    }
    if (secret_file.empty()) secret_file = config->secret_file();
    if (name.empty()) name = config->name();
    if (controller.empty()) controller = config->controller();
    endpoints.insert(endpoints.begin(), from_config.begin(), from_config.end());
    std::vector<std::string> config_tenants;
    for (const auto& t : config->tenant()) {
      config_tenants.push_back(
          t.name() + (t.has_uid()   ? "=uid:" + std::to_string(t.uid())
                      : t.has_gid() ? "=gid:" + std::to_string(t.gid())
                                    : "=cgroup:" + t.cgroup()));
    }
    tenants.insert(tenants.begin(), config_tenants.begin(),
                   config_tenants.end());
    if (rules_file.empty()) rules_file = config->rules_file();
    inline_rules.assign(config->rule().begin(), config->rule().end());
    if (kernel_cache_opt->count() == 0 && !config->kernel_cache().empty()) {
      kernel_cache = config->kernel_cache();
    }
    if (control_socket.empty()) control_socket = config->control_socket();
    if (threads_opt->count() == 0 && config->threads() != 0) {
      if (config->threads() > 1024) return Die("threads: at most 1024");
      fuse_threads = static_cast<int>(config->threads());
    }
    if (poll_us_opt->count() == 0 && config->has_poll_us()) {
      if (config->poll_us() > 100000) return Die("poll_us: at most 100000");
      poll_us = static_cast<int>(config->poll_us());
    }
    if (config->io_uring()) io_uring = true;
    if (nice_opt->count() == 0 && config->has_nice()) {
      if (config->nice() < -20 || config->nice() > 19) {
        return Die("nice: must be in -20..19, not " +
                   std::to_string(config->nice()));
      }
      nice_value = config->nice();
      nice_asked = true;
    }
    for (const std::string& o : config->fuse_option()) {
      options += (options.empty() ? "" : ",") + o;
    }
  }
  if (io_uring) {
    const std::string why = sroute::UringUnavailableReason();
    if (!why.empty()) return Die("--io-uring: " + why);
  }
  if (backing.empty()) {
    return Die(
        "no backing directory: give --backing DIR or backing: in "
        "--config");
  }

  sroute::SetLogTag("sroute-fuse");
  // Before any thread starts: threads take their priority from the thread
  // that creates them.
  if (setpriority(PRIO_PROCESS, 0, nice_value) != 0) {
    const std::string why = std::strerror(errno);
    if (nice_asked) {
      return Die("cannot run at nice " + std::to_string(nice_value) + ": " +
                 why +
                 " (lowering the nice value needs CAP_SYS_NICE or "
                 "RLIMIT_NICE)");
    }
    sroute::LogInfo("running at nice ", getpriority(PRIO_PROCESS, 0), ", not ",
                    nice_value, ": ", why);
  }
  if (name.empty()) {
    char hostname[256] = "localhost";
    gethostname(hostname, sizeof(hostname) - 1);
    std::error_code ec;
    const auto abs = std::filesystem::absolute(mountpoint, ec);
    name = std::string("fuse@") + hostname + ":" +
           (ec ? mountpoint : abs.lexically_normal().string());
  }
  const bool remote_home = sroute::IsServerAddress(backing);
  bool any_remote = remote_home;
  for (const std::string& spec : endpoints) {
    const size_t eq = spec.find('=');
    if (eq != std::string::npos &&
        sroute::IsServerAddress(std::string_view(spec).substr(eq + 1))) {
      any_remote = true;
    }
  }
  sroute::RemoteContext remote;
  remote.local_name = name;
  remote.role = "fuse";
  remote.timeout = absl::Milliseconds(remote_timeout_ms);
  if (any_remote || !controller.empty()) {
    if (secret_file.empty()) {
      return Die(
          "storage servers and the controller need the cluster secret: give "
          "--secret-file FILE");
    }
    auto secret = sroute::LoadSecretFile(secret_file);
    if (!secret.ok()) return Die(std::string(secret.status().message()));
    remote.secret = *std::move(secret);
  }
  // Threads that carry IO to storage servers. In the background they start
  // only after fuse_daemonize's fork (threads do not survive a fork).
  const bool stay = foreground || debug;
  std::unique_ptr<sroute::IoThreads> io_threads;
  if (any_remote || !controller.empty()) {
    io_threads = std::make_unique<sroute::IoThreads>(
        2, /*start=*/stay, std::chrono::microseconds(poll_us));
    remote.threads = io_threads.get();
  }
  // What the controller learns of this host.
  sroute::AgentOptions agent_options;
  agent_options.address = controller;
  agent_options.register_timeout = absl::Milliseconds(controller_timeout_ms);
  agent_options.secret = remote.secret;
  agent_options.host.set_sswitch(name);
  agent_options.host.set_role("fuse");
  auto describe = [&](const std::string& ep_name, const std::string& where) {
    sroute::proto::EndpointInfo* e = agent_options.host.add_endpoints();
    e->set_name(ep_name);
    e->set_kind(sroute::IsServerAddress(where) ? "server" : "dir");
    e->set_address(where);
  };
  describe("home", backing);
  for (const std::string& spec : endpoints) {
    const size_t eq = spec.find('=');
    if (eq != std::string::npos)
      describe(spec.substr(0, eq), spec.substr(eq + 1));
  }

  sroute::Host host(name);
  auto add_endpoint = [&](const std::string& ep_name,
                          const std::string& where) -> absl::Status {
    return sroute::AddEndpoint(host, ep_name, where, remote);
  };
  if (auto s = add_endpoint("home", backing); !s.ok()) {
    return Die(
        std::string(remote_home ? "backing server " : "backing directory ") +
        backing + ": " + std::string(s.message()));
  }
  for (const std::string& spec : endpoints) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      return Die("--endpoint wants NAME=DIR or NAME=HOST:PORT, got '" + spec +
                 "'");
    }
    if (auto s = add_endpoint(spec.substr(0, eq), spec.substr(eq + 1));
        !s.ok()) {
      return Die("endpoint " + spec + ": " + std::string(s.message()));
    }
  }
  if (!rules_file.empty()) {
    if (auto s = host.LoadRulesFile(rules_file); !s.ok()) {
      return Die(std::string(s.message()));
    }
  }
  if (!inline_rules.empty()) {
    std::string text;
    for (const std::string& r : inline_rules) text += r + "\n";
    if (auto s = host.LoadRules(text, config_file + " rule", "config");
        !s.ok()) {
      return Die(std::string(s.message()));
    }
  }
  // The reserved folder: files unlinked while open wait there. (A storage
  // server makes its own.)
  std::error_code ec;
  if (!remote_home) {
    std::filesystem::create_directories(
        backing + "/" + sroute::kReservedDir + "/unlinked", ec);
  }
  if (ec == std::errc::read_only_file_system) {
    // A read-only volume: nothing can be unlinked, nothing waits there.
    std::cerr << "sroute-fuse: " << backing
              << " is read-only; the volume will be too\n";
    ec.clear();
  }
  if (ec) {
    return Die("cannot create " + backing + "/" + sroute::kReservedDir +
               "/unlinked: " + ec.message());
  }
  if (IsMountPoint(mountpoint)) {
    return Die("mount point " + mountpoint + " is in use (already mounted)");
  }

  sroute::VolumeOptions vopts;
  for (const std::string& spec : tenants) {
    if (auto s = vopts.tenants.Add(spec); !s.ok()) {
      return Die(std::string(s.message()));
    }
  }
  vopts.kernel_cache = kernel_cache == "off"
                           ? sroute::VolumeOptions::KernelCache::kOff
                           : sroute::VolumeOptions::KernelCache::kAuto;
  sroute::Volume volume(&host.sswitch(), vopts);

  // With a controller, its rules (and the delegate-made rules recovered from
  // the servers) are in place before the volume serves its first IO.
  std::unique_ptr<sroute::ControllerAgent> agent;
  if (!controller.empty()) {
    if (stay) {
      auto a = sroute::ControllerAgent::Start(&host.sswitch(), io_threads.get(),
                                              agent_options);
      if (!a.ok()) return Die(std::string(a.status().message()));
      agent = *std::move(a);
    } else {
      // Threads do not survive fuse_daemonize's fork: register now with
      // threads of the moment, and again, quietly, after the fork.
      sroute::IoThreads before_fork(1);
      auto a = sroute::ControllerAgent::Start(&host.sswitch(), &before_fork,
                                              agent_options);
      if (!a.ok()) return Die(std::string(a.status().message()));
    }
    agent_options.fresh = false;
    agent_options.require_registration = false;
  }

  // FUSE interrupts the session loop answered with ENOSYS (a gauge).
  std::atomic<uint64_t> interrupts_refused{0};
  // What the io_uring queues did (gauges).
  sroute::UringStats uring_stats;
  std::unique_ptr<sroute::ControlServer> control;
  auto start_control = [&]() -> bool {
    if (control_socket.empty()) return true;
    auto server = sroute::ControlServer::Start(
        &host.sswitch(), control_socket,
        /*on_rules_changed=*/nullptr,
        [&volume, &agent, &interrupts_refused,
         &uring_stats](sroute::proto::ControlResponse* resp) {
          auto& gauges = *resp->mutable_gauges();
          gauges["fuse_inodes"] = static_cast<int64_t>(volume.inodes().size());
          gauges["fuse_interrupts_refused"] =
              static_cast<int64_t>(interrupts_refused.load());
          gauges["fuse_uring_requests"] =
              static_cast<int64_t>(uring_stats.requests.load());
          gauges["fuse_uring_boosts"] =
              static_cast<int64_t>(uring_stats.boosts.load());
          gauges["fuse_pending_invalidations"] =
              static_cast<int64_t>(volume.pending_invalidations());
          if (agent) {
            gauges["controller_connected"] = agent->connected() ? 1 : 0;
            gauges["delegate_rules_restored"] =
                static_cast<int64_t>(agent->records_restored());
          }
        });
    if (!server.ok()) {
      Die(std::string(server.status().message()));
      return false;
    }
    control = *std::move(server);
    return true;
  };
  // fuse_daemonize forks, and threads do not survive a fork: in the
  // background the control server starts after it.
  if (stay && !start_control()) return 1;

  // The kernel applied the caller's umask already.
  umask(0);
  std::vector<std::string> fargs = {argv[0], "-o",
                                    "fsname=sroute,subtype=sroute,"
                                    "default_permissions,allow_other"};
  if (!options.empty()) fargs.insert(fargs.end(), {"-o", options});
  if (debug) fargs.push_back("-d");
  std::vector<char*> cargs;
  for (std::string& a : fargs) cargs.push_back(a.data());
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(cargs.size()), cargs.data());

  fuse_session* se =
      fuse_session_new(&args, &volume.ops(), sizeof(volume.ops()), &volume);
  if (se == nullptr) return Die("bad FUSE options");
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    return Die("cannot mount on " + mountpoint);
  }
  // A stop signal that came while starting (blocked until now) ends the
  // volume as soon as it serves; after fuse_daemonize's fork it would be
  // left pending in the parent.
  if (sroute::TakeStopSignal()) fuse_session_exit(se);
  fuse_daemonize(stay ? 1 : 0);
  if (!stay && io_threads) io_threads->StartAfterFork();
  if (!stay && !controller.empty()) {
    auto a = sroute::ControllerAgent::Start(&host.sswitch(), io_threads.get(),
                                            agent_options);
    if (a.ok()) agent = *std::move(a);
  }
  volume.StartInvalidating(se);
  if (!stay && !start_control()) {
    volume.StopInvalidating();
    fuse_session_unmount(se);
    return 1;
  }
  sroute::SessionLoopOptions loop_options;
  loop_options.workers = fuse_threads;
  // -d prints every request as libfuse parses it: let it see them all.
  if (!debug) {
    loop_options.raw_handler = [&volume](fuse_session* s,
                                         const sroute::RawRequest& r) {
      return volume.ServeRaw(s, r);
    };
  }
  loop_options.interrupts_refused = &interrupts_refused;
  loop_options.poll_window = std::chrono::microseconds(poll_us);
  loop_options.io_uring = io_uring;
  loop_options.uring_stats = &uring_stats;
  const int rc = sroute::RunSessionLoop(se, loop_options);
  if (rc != 0) {
    sroute::LogError("serving FUSE requests on ", mountpoint,
                     " failed: ", std::strerror(-rc), "; unmounting");
  }
  // No control request may touch the session from here on.
  control.reset();
  agent.reset();
  volume.StopInvalidating();
  if (io_threads) {
    // IOs on their way back from storage servers reply to the session:
    // let them finish (each within its deadline), then stop the threads
    // that would run their completions, before the session goes.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(remote_timeout_ms + 1000);
    while (host.sswitch().in_flight() > 0 &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    io_threads->Stop();
  }
  fuse_session_unmount(se);
  fuse_session_destroy(se);
  fuse_opt_free_args(&args);
  return rc == 0 ? 0 : 1;
}

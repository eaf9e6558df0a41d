// SPDX-License-Identifier: Apache-2.0
#include "host/flags.h"

#include "endpoints/remote_endpoint.h"
#include "stages/stage_spec.h"
#include "util/strings.h"

namespace sroute {

absl::StatusOr<proto::HostConfig::Endpoint> ParseEndpointSpec(
    const std::string& spec) {
  const size_t eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return absl::InvalidArgumentError(StrCat(
        "--endpoint wants NAME=DIR, NAME=HOST:PORT or NAME=flash:DIR[,...], "
        "got '",
        spec, "'"));
  }
  proto::HostConfig::Endpoint e;
  e.set_name(spec.substr(0, eq));
  const std::string where = spec.substr(eq + 1);
  if (where.starts_with("flash:")) {
    e.set_flash(where.substr(6));
  } else if (IsServerAddress(where)) {
    e.set_server(where);
  } else {
    e.set_dir(where);
  }
  return e;
}

HostFlags::HostFlags(CLI::App* app, HostKind kind) : kind_(kind) {
  proto::HostConfig* o = &overlay_;
  app->add_option("--config", config_file_,
                  "configuration file (protobuf text format, HostConfig in "
                  "proto/config.proto); flags add to it or override it");
  app->add_option_function<std::string>(
      "--name", [o](const std::string& v) { o->set_name(v); },
      kind == HostKind::kFuse
          ? "this host's sSwitch name [fuse@HOSTNAME:MOUNTPOINT]"
          : "this server's endpoint name: its files are //NAME/PATH [server]");
  AddParsedFlag(
      app, "--endpoint", ParseEndpointSpec,
      [o](proto::HostConfig::Endpoint e) { *o->add_endpoint() = std::move(e); },
      "more endpoints: NAME=DIR, a storage server NAME=HOST:PORT or an "
      "emulated flash device NAME=flash:DIR[,preset=rackblox,dilation=10,...] "
      "(repeatable)");
  AddParsedFlag(
      app, "--stage", ParseStageSpec,
      [o](proto::StageConfig st) { *o->add_stage() = std::move(st); },
      "a stage rules can send IOs through: NAME=KIND[:key=value,...], e.g. "
      "cacheA=cache:partition_bytes=256M,policy=s3fifo (repeatable; kinds "
      "and options in proto/config.proto)");
  app->add_option_function<std::string>(
      "--secret-file", [o](const std::string& v) { o->set_secret_file(v); },
      "the cluster secret (a private file of 16+ bytes), for storage "
      "servers and the controller");
  app->add_option_function<std::string>(
      "--controller", [o](const std::string& v) { o->set_controller(v); },
      "register with the controller at HOST:PORT (its rules are installed "
      "before the host serves)");
  app->add_option_function<uint32_t>(
         "--controller-timeout-ms",
         [o](uint32_t v) { o->set_controller_timeout_ms(v); },
         "how long to wait for the controller at start [10000]")
      ->check(CLI::Range(1, 3600000));
  app->add_option_function<uint32_t>(
         "--remote-timeout-ms",
         [o](uint32_t v) { o->set_remote_timeout_ms(v); },
         "deadline of each IO sent to a storage server [10000]")
      ->check(CLI::Range(1, 3600000));
  app->add_option_function<std::string>(
      "--rules", [o](const std::string& v) { o->set_rules_file(v); },
      "rules file to install at start");
  app->add_option_function<std::vector<std::string>>(
         "--rule",
         [o](const std::vector<std::string>& rules) {
           for (const std::string& r : rules) o->add_rule(r);
         },
         "a rule to install, after the file's (repeatable)")
      ->take_all();
  app->add_option_function<std::string>(
      "--control", [o](const std::string& v) { o->set_control_socket(v); },
      "serve live control (sroutectl --host unix:SOCKET) on this unix "
      "socket (mode 0600)");
  // Polling saves waking a thread per request. By default the network
  // threads poll only while requests flow (rpc/io_threads.h); FUSE workers
  // on /dev/fuse poll only when asked, since their reply must then wake
  // the caller on another CPU, where the kernel's own hand-off runs it on
  // the caller's (bench/RESULTS.md).
  app->add_option_function<uint32_t>(
         "--poll-us", [o](uint32_t v) { o->set_poll_us(v); },
         "after each request or reply, keep polling this many microseconds "
         "before sleeping, always (0: never). Default: the network thread "
         "polls up to 200 while requests flow, and FUSE workers on "
         "/dev/fuse do not")
      ->check(CLI::Range(0, 100000));
  app->add_option_function<std::string>(
      "--metrics", [o](const std::string& v) { o->set_metrics(v); },
      "serve Prometheus metrics at http://HOST:PORT/metrics (port 0: any)");
  app->add_option_function<uint32_t>(
         "--metrics-rules", [o](uint32_t v) { o->set_metrics_rules(v); },
         "rules with series of their own in the metrics, the busiest; the "
         "others are summed as rule_id=\"other\" [100]")
      ->check(CLI::Range(0, 100000));
  app->add_option_function<uint32_t>(
         "--io-threads", [o](uint32_t v) { o->set_io_threads(v); },
         "network threads (given, they do not poll unless --poll-us says "
         "so) [one, polling while requests flow]")
      ->check(CLI::Range(1, 64));
}

absl::StatusOr<proto::HostConfig> HostFlags::Resolve() const {
  proto::HostConfig config;
  if (!config_file_.empty()) {
    auto loaded = LoadHostConfig(config_file_);
    if (!loaded.ok()) return loaded.status();
    if (absl::Status s = CheckHostConfig(*loaded, kind_, config_file_);
        !s.ok()) {
      return s;
    }
    config = *std::move(loaded);
  }
  config = MergeHostConfig(std::move(config), overlay_);
  if (absl::Status s = CheckHostConfig(config, kind_, "command line");
      !s.ok()) {
    return s;
  }
  return config;
}

}  // namespace sroute

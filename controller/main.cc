// sroute-controller --db DIR --listen HOST:PORT --secret-file FILE
//                   [--app NAME[:ARGS]]... [--plugin LIB.so]...
//                   [--stats-interval-ms N] [--metrics HOST:PORT]
//
// The controller: hosts (sroute-fuse, sroute-server started with
// --controller) register with it; it persists their rules, updates them
// consistently, collects statistics and runs control applications.
// Prints "listening on HOST:PORT" once it serves; stops on SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "controller/controller.h"
#include "rpc/handshake.h"
#include "util/log.h"

int main(int argc, char** argv) {
  CLI::App app{"sroute-controller: rules, updates, statistics, control apps"};
  sroute::ControllerOptions o;
  std::string secret_file;
  std::vector<std::string> plugins;
  int interval_ms = 1000;
  app.add_option("--db", o.db_dir, "database directory (RocksDB)")->required();
  app.add_option("--listen", o.listen, "HOST:PORT to listen on (port 0: any)")
      ->capture_default_str();
  app.add_option("--secret-file", secret_file,
                 "the cluster secret (a private file of 16+ bytes)")
      ->required();
  app.add_option("--app", o.apps, "run a control app, NAME or NAME:ARGS");
  app.add_option("--metrics", o.metrics,
                 "serve Prometheus metrics at http://HOST:PORT/metrics");
  app.add_option("--plugin", plugins,
                 "load control apps from a shared library");
  app.add_option("--stats-interval-ms", interval_ms, "statistics interval")
      ->capture_default_str()
      ->check(CLI::Range(10, 3600000));
  CLI11_PARSE(app, argc, argv);
  sroute::SetLogTag("sroute-controller");
  o.stats_interval = absl::Milliseconds(interval_ms);

  auto secret = sroute::LoadSecretFile(secret_file);
  if (!secret.ok()) {
    std::cerr << "sroute-controller: " << secret.status().message() << "\n";
    return 1;
  }
  o.secret = *std::move(secret);
  for (const std::string& p : plugins) {
    if (auto s = sroute::LoadControlAppPlugin(p); !s.ok()) {
      std::cerr << "sroute-controller: " << s.message() << "\n";
      return 1;
    }
  }

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto controller = sroute::Controller::Start(std::move(o));
  if (!controller.ok()) {
    std::cerr << "sroute-controller: " << controller.status().message() << "\n";
    return 1;
  }
  std::printf("listening on %s\n", (*controller)->address().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  sroute::LogInfo("stopping (signal ", sig, ")");
  controller->reset();
  return 0;
}

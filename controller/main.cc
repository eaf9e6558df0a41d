// SPDX-License-Identifier: Apache-2.0
// sroute-controller (--db DIR | --store rocksdb:DIR | --store etcd://H:P,...)
//                   --listen HOST:PORT --secret-file FILE
//                   [--id ID] [--advertise HOST:PORT] [--leader-ttl-s N]
//                   [--app NAME[:ARGS]]... [--plugin LIB.so]...
//                   [--stats-interval-ms N] [--metrics HOST:PORT]
//
// The controller: hosts (sroute-fuse, sroute-server started with
// --controller) register with it; it persists their rules, updates them
// consistently, collects statistics and runs control applications.
// Several controllers may share an etcd store: one leads, the others point
// hosts and clients to it and take over when it goes.
// Prints "listening on HOST:PORT" once it serves; stops on SIGINT/SIGTERM.
// A controller whose leadership is gone exits with status 75 (EX_TEMPFAIL)
// for its supervisor to start it again, as a follower.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "controller/controller.h"
#include "rpc/handshake.h"
#include "util/log.h"

int main(int argc, char** argv) {
  CLI::App app{"sroute-controller: rules, updates, statistics, control apps"};
  app.set_version_flag("--version",
                       std::string("sroute-controller ") + SROUTE_VERSION);
  sroute::ControllerOptions o;
  std::string secret_file;
  std::vector<std::string> plugins;
  int interval_ms = 1000;
  auto* db = app.add_option("--db", o.db_dir,
                            "database directory (RocksDB); as --store "
                            "rocksdb:DIR");
  auto* store = app.add_option(
      "--store", o.store,
      "rocksdb:DIR, or etcd://HOST:PORT[,HOST:PORT...][/PREFIX] to share "
      "the state with other controllers (one leads)");
  db->excludes(store);
  store->excludes(db);
  app.add_option("--id", o.id,
                 "this controller's name among those sharing an etcd store "
                 "(default: its address)");
  app.add_option("--advertise", o.advertise,
                 "HOST:PORT where hosts and other controllers reach this "
                 "one (default: --listen)");
  int leader_ttl_s = 3;
  app.add_option("--leader-ttl-s", leader_ttl_s,
                 "etcd: the leader's lease; a dead leader is replaced "
                 "within about this")
      ->capture_default_str()
      ->check(CLI::Range(1, 600));
  int store_wait_s = 30;
  app.add_option("--store-wait-s", store_wait_s,
                 "etcd: how long to wait at start for the cluster to answer")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600));
  app.add_option("--etcd-max-txn-ops", o.etcd_max_txn_ops,
                 "etcd: the most keys one change writes (etcd's "
                 "--max-txn-ops)")
      ->capture_default_str()
      ->check(CLI::Range(8, 1000000));
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
  if (o.db_dir.empty() && o.store.empty()) {
    std::cerr << "sroute-controller: where is the state? --db DIR or "
                 "--store rocksdb:DIR|etcd://HOST:PORT,...\n";
    return 1;
  }
  o.stats_interval = absl::Milliseconds(interval_ms);
  o.leader_ttl = absl::Seconds(leader_ttl_s);
  o.store_wait = absl::Seconds(store_wait_s);
  o.on_leadership_lost = [](const std::string& why) {
    sroute::LogError("exiting: this controller no longer leads (", why,
                     "); started again, it follows the new leader");
    _exit(75);
  };

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

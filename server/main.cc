// sroute-server --root DIR --listen HOST:PORT --secret-file FILE
//               [--name NAME] [--state DIR] [--rules FILE] [--rule RULE]...
//               [--endpoint NAME=DIR|NAME=HOST:PORT]... [--io-threads N]
//               [--controller HOST:PORT]
//
// A storage server: exports DIR as endpoint NAME (files //NAME/PATH) to
// hosts that know the cluster secret, with its own sSwitch and rules.
// Prints "listening on HOST:PORT" once it serves; stops on SIGINT/SIGTERM.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "rpc/handshake.h"
#include "server/storage_server.h"
#include "util/log.h"

int main(int argc, char** argv) {
  CLI::App app{"sroute-server: a storage server with its own sSwitch"};
  sroute::StorageServerOptions o;
  std::string secret_file;
  int timeout_ms = 10000;
  app.add_option("--root", o.root, "the directory to export")->required();
  app.add_option("--listen", o.listen, "HOST:PORT to listen on (port 0: any)")
      ->capture_default_str();
  app.add_option("--secret-file", secret_file,
                 "the cluster secret (a private file of 16+ bytes)")
      ->required();
  app.add_option("--name", o.name,
                 "this server's endpoint name: its files are //NAME/PATH")
      ->capture_default_str();
  app.add_option("--state", o.state_dir,
                 "state store (RocksDB) directory [ROOT/.sroute/state]");
  app.add_option("--rules", o.rules_file, "rules file to install at start");
  app.add_option("--rule", o.rules, "a rule to install (repeatable)");
  app.add_option("--endpoint", o.endpoints,
                 "more endpoints: NAME=DIR or NAME=HOST:PORT (repeatable)");
  app.add_option("--controller", o.controller,
                 "register with the controller at HOST:PORT");
  app.add_option("--io-threads", o.io_threads, "network threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  int poll_us = 0;
  app.add_option("--poll-us", poll_us,
                 "busy-poll the network this many microseconds after each "
                 "event before sleeping (lower latency, more CPU; one "
                 "network thread)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app.add_option("--remote-timeout-ms", timeout_ms,
                 "deadline of IOs this server sends to other servers")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600000));
  CLI11_PARSE(app, argc, argv);
  sroute::SetLogTag("sroute-server");
  o.remote_timeout = absl::Milliseconds(timeout_ms);
  o.poll_window = std::chrono::microseconds(poll_us);

  auto secret = sroute::LoadSecretFile(secret_file);
  if (!secret.ok()) {
    std::cerr << "sroute-server: " << secret.status().message() << "\n";
    return 1;
  }
  o.secret = *std::move(secret);

  // Signals are taken by sigwait below; block them before any thread starts
  // so none of them gets one.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = sroute::StorageServer::Start(std::move(o));
  if (!server.ok()) {
    std::cerr << "sroute-server: " << server.status().message() << "\n";
    return 1;
  }
  std::printf("listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  sroute::LogInfo("serving ", (*server)->name(), " on ", (*server)->address());
  int sig = 0;
  sigwait(&stop, &sig);
  sroute::LogInfo("stopping (signal ", sig, ")");
  server->reset();
  return 0;
}

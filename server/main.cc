// SPDX-License-Identifier: Apache-2.0
// sroute-server --root DIR --listen HOST:PORT --secret-file FILE
//               [--config FILE] [--name NAME] [--state DIR] [--rules FILE]
//               [--rule RULE]... [--endpoint NAME=DIR|NAME=HOST:PORT]...
//               [--controller HOST:PORT] [--control SOCKET]
//               [--io-threads N] [--poll-us N] [--metrics HOST:PORT]
//
// A storage server: exports DIR as endpoint NAME (files //NAME/PATH) to
// hosts that know the cluster secret, with its own sSwitch and rules.
// Prints "listening on HOST:PORT" once it serves; stops on SIGINT/SIGTERM;
// on SIGHUP reads its rules file again and replaces its rules (one atomic
// update; a bad file changes nothing and is logged) unless it has a
// controller, whose rules they are.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "host/flags.h"
#include "server/storage_server.h"
#include "util/log.h"

int main(int argc, char** argv) {
  CLI::App app{"sroute-server: a storage server with its own sSwitch"};
  app.set_version_flag("--version",
                       std::string("sroute-server ") + SROUTE_VERSION);
  sroute::HostFlags flags(&app, sroute::HostKind::kServer);
  sroute::proto::HostConfig* o = &flags.overlay();
  app.add_option_function<std::string>(
      "--root", [o](const std::string& v) { o->set_root(v); },
      "the directory to export");
  app.add_option_function<std::string>(
      "--listen", [o](const std::string& v) { o->set_listen(v); },
      "HOST:PORT to listen on (port 0: any) [127.0.0.1:7400]");
  app.add_option_function<std::string>(
      "--state", [o](const std::string& v) { o->set_state_dir(v); },
      "state store (RocksDB) directory [ROOT/.sroute/state]");
  CLI11_PARSE(app, argc, argv);
  sroute::SetLogTag("sroute-server");
  auto config = flags.Resolve();
  if (!config.ok()) {
    std::cerr << "sroute-server: " << config.status().message() << "\n";
    return 1;
  }

  // Signals are taken by sigwait below; block them before any thread starts
  // so none of them gets one.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto server = sroute::StorageServer::Start(*config);
  if (!server.ok()) {
    std::cerr << "sroute-server: " << server.status().message() << "\n";
    return 1;
  }
  std::printf("listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  sroute::LogInfo("serving ", (*server)->name(), " on ", (*server)->address());
  int sig = 0;
  while (sigwait(&stop, &sig) == 0 && sig == SIGHUP) {
    auto n = (*server)->ReloadRulesFile();
    if (n.ok()) {
      sroute::LogInfo("SIGHUP: rules file read again: ", *n, " rules");
    } else {
      sroute::LogError("SIGHUP: rules unchanged: ", n.status().message());
    }
  }
  sroute::LogInfo("stopping (signal ", sig, ")");
  server->reset();
  return 0;
}

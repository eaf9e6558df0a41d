// SPDX-License-Identifier: Apache-2.0
// sroute-hello-app --controller HOST:PORT --secret-file FILE
//                  --args "sswitch=NAME,file=//HOST/PATH,to=//HOST/PATH"
//                  [--name NAME]
//
// HelloApp (hello_app.h) in a process of its own: the same app the plug-in
// runs inside sroute-controller, here driven by a ControllerClient over the
// controller's RPC. Exits 0 once the app is done (writes are home again),
// 1 on a bad argument or an app error, 2 if the controller is unreachable.
#include <signal.h>

#include <atomic>
#include <iostream>

#include "CLI/CLI.hpp"
#include "controller/client.h"
#include "examples/hello_app/hello_app.h"
#include "rpc/handshake.h"
#include "util/log.h"

namespace {

std::atomic<sroute::ControllerClient*> g_client{nullptr};

// Stop() only sets an atomic flag, which is safe in a signal handler.
void OnSignal(int) {
  if (sroute::ControllerClient* c = g_client.load()) c->Stop();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"sroute-hello-app: moves a file's writes away and back"};
  sroute::ControllerClient::Options o;
  std::string secret_file, args;
  o.name = "hello";
  cli.add_option("--controller", o.address, "the controller's HOST:PORT")
      ->required();
  cli.add_option("--secret-file", secret_file, "the cluster secret")
      ->required();
  cli.add_option("--args", args,
                 "sswitch=NAME,file=//HOST/PATH,to=//HOST/PATH"
                 "[,period_ms=N][,state=KEY]")
      ->required();
  cli.add_option("--name", o.name,
                 "the app's name at the controller (owner of its rules and "
                 "scope of its state)")
      ->capture_default_str();
  CLI11_PARSE(cli, argc, argv);
  sroute::SetLogTag("sroute-hello-app");

  auto app = sroute::HelloApp::Create(args);
  if (!app.ok()) {
    std::cerr << "sroute-hello-app: " << app.status().message() << "\n";
    return 1;
  }
  auto secret = sroute::LoadSecretFile(secret_file);
  if (!secret.ok()) {
    std::cerr << "sroute-hello-app: " << secret.status().message() << "\n";
    return 1;
  }
  o.secret = *std::move(secret);
  auto client = sroute::ControllerClient::Connect(o);
  if (!client.ok()) {
    std::cerr << "sroute-hello-app: " << client.status().message() << "\n";
    return 2;
  }
  (*app)->set_on_done([c = client->get()] { c->Stop(); });
  g_client = client->get();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const absl::Status s = (*client)->Run(**app);
  g_client = nullptr;
  if (!s.ok()) {
    std::cerr << "sroute-hello-app: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

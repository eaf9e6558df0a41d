// SPDX-License-Identifier: Apache-2.0
// The plug-in entry point: `sroute-controller --plugin libsroute_hello_app.so
// --app hello:ARGS` calls it once, before it starts the apps. Everything
// else the plug-in uses (the registry, the rule parser, logging) it takes
// from the controller executable that loads it.
#include "controller/app_api.h"
#include "examples/hello_app/hello_app.h"
#include "util/log.h"

extern "C" __attribute__((visibility("default"))) void sroute_register_apps(
    sroute::ControlAppRegistry* registry) {
  absl::Status s = registry->Register(
      "hello",
      [](const std::string& args)
          -> absl::StatusOr<std::unique_ptr<sroute::ControlApp>> {
        return sroute::HelloApp::Create(args);
      });
  // A taken name leaves `--app hello` running the other app: say so.
  if (!s.ok()) sroute::LogError("hello plug-in: ", s.message());
}

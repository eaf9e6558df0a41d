// SPDX-License-Identifier: Apache-2.0
// HostFlags: the command-line flags every host takes (sroute-fuse and
// sroute-server), written into a HostConfig overlay: a flag that is given
// sets its field, one that is not leaves the config file's value.
//
//   CLI::App app{"..."};
//   sroute::HostFlags flags(&app, sroute::HostKind::kServer);
//   app.add_option_function<std::string>("--root", [&](const std::string& v) {
//     flags.overlay().set_root(v); }, "...");
//   CLI11_PARSE(app, argc, argv);
//   auto config = flags.Resolve();  // --config FILE, then the flags, checked
#ifndef SROUTE_HOST_FLAGS_H_
#define SROUTE_HOST_FLAGS_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "host/config.h"

namespace sroute {

class HostFlags {
 public:
  // Adds --config, --name, --endpoint, --stage, --secret-file, --controller,
  // --controller-timeout-ms, --remote-timeout-ms, --rules, --rule,
  // --control, --poll-us, --io-threads, --metrics and --metrics-rules to
  // `app`.
  // REQUIRES: `app` outlives this object's use by app.parse.
  HostFlags(CLI::App* app, HostKind kind);
  HostFlags(const HostFlags&) = delete;
  HostFlags& operator=(const HostFlags&) = delete;

  // What the flags given set; daemon-specific flags write here too.
  proto::HostConfig& overlay() { return overlay_; }

  // The --config file's config (if any) overlaid by the flags, checked for
  // this kind of host. Errors name the file or "command line".
  absl::StatusOr<proto::HostConfig> Resolve() const;

 private:
  const HostKind kind_;
  std::string config_file_;
  proto::HostConfig overlay_;
};

// Adds repeatable flag `name` to `app`: each value goes through `parse`
// (string -> absl::StatusOr<T>), a refused one is a usage error with
// parse's message, and `add` takes the others (T&&) in order.
template <class Parse, class Add>
CLI::Option* AddParsedFlag(CLI::App* app, const std::string& name, Parse parse,
                           Add add, const std::string& help) {
  return app
      ->add_option_function<std::vector<std::string>>(
          name,
          [parse, add](const std::vector<std::string>& values) {
            for (const std::string& v : values) {
              auto parsed = parse(v);
              if (!parsed.ok()) {
                throw CLI::ValidationError(
                    std::string(parsed.status().message()));
              }
              add(*std::move(parsed));
            }
          },
          help)
      ->take_all();
}

// "NAME=DIR" or "NAME=HOST:PORT" as a config's endpoint.
absl::StatusOr<proto::HostConfig::Endpoint> ParseEndpointSpec(
    const std::string& spec);

}  // namespace sroute

#endif  // SROUTE_HOST_FLAGS_H_

// SPDX-License-Identifier: Apache-2.0
// The configuration of a host (proto/config.proto, HostConfig): read from a
// file in protobuf text format, overlaid by command-line flags
// (host/flags.h), and checked for the daemon it is for.
#ifndef SROUTE_HOST_CONFIG_H_
#define SROUTE_HOST_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace sroute {

// The daemons a HostConfig can describe.
enum class HostKind { kFuse, kServer };
const char* HostKindName(HostKind kind);  // "fuse", "server"

// Parses `path`. Errors read "PATH:LINE:COL: reason" for syntax. Relative
// rules_file and secret_file are made relative to the config file's
// directory. Values are checked by CheckHostConfig, not here.
absl::StatusOr<proto::HostConfig> LoadHostConfig(const std::string& path);

// Checks `config` for a daemon of `kind`: versions, endpoints, tenants,
// value ranges, and fields that belong to the other daemon. Errors read
// "ORIGIN: reason".
absl::Status CheckHostConfig(const proto::HostConfig& config, HostKind kind,
                             const std::string& origin);

// `overlay` over `base`: repeated fields (endpoints, tenants, rules, FUSE
// options) are appended after base's, set singular fields replace base's.
proto::HostConfig MergeHostConfig(proto::HostConfig base,
                                  const proto::HostConfig& overlay);

}  // namespace sroute

#endif  // SROUTE_HOST_CONFIG_H_

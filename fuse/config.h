// Reading sroute-fuse's configuration file (protobuf text format,
// proto/config.proto).
#ifndef SROUTE_FUSE_CONFIG_H_
#define SROUTE_FUSE_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace sroute {

// Parses and checks `path`. Errors read "PATH:LINE:COL: reason" for syntax
// and "PATH: reason" for bad values. A relative rules_file is made relative
// to the config file's directory.
absl::StatusOr<proto::VolumeConfig> LoadVolumeConfig(const std::string& path);

}  // namespace sroute

#endif  // SROUTE_FUSE_CONFIG_H_

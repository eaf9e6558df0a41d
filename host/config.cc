// SPDX-License-Identifier: Apache-2.0
#include "host/config.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "endpoints/flash_endpoint.h"
#include "endpoints/remote_endpoint.h"
#include "stages/stage.h"
#include "util/strings.h"
#include "util/text_proto.h"

namespace sroute {
namespace {

std::string RelativeTo(const std::string& config_path,
                       const std::string& path) {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(config_path).parent_path() / path).string();
}

}  // namespace

const char* HostKindName(HostKind kind) {
  return kind == HostKind::kFuse ? "fuse" : "server";
}

absl::StatusOr<proto::HostConfig> LoadHostConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(StrCat("cannot read config file ", path));
  std::stringstream text;
  text << in.rdbuf();
  proto::HostConfig config;
  if (absl::Status s = ParseTextProto(text.str(), path, &config); !s.ok()) {
    return s;
  }
  config.set_secret_file(RelativeTo(path, config.secret_file()));
  config.set_rules_file(RelativeTo(path, config.rules_file()));
  return config;
}

absl::Status CheckHostConfig(const proto::HostConfig& c, HostKind kind,
                             const std::string& origin) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(StrCat(origin, ": ", why));
  };
  if (c.version() > 1) {
    return bad(StrCat("version ", c.version(),
                      " is newer than this sroute understands (1)"));
  }
  for (const auto& e : c.endpoint()) {
    if (e.name().empty() ||
        (e.dir().empty() && e.server().empty() && e.flash().empty())) {
      return bad("every endpoint needs a name and a dir, a server or flash");
    }
    if (!e.flash().empty()) {
      if (auto spec = ParseFlashSpec(e.flash()); !spec.ok()) {
        return bad(
            StrCat("endpoint ", e.name(), ": ", spec.status().message()));
      }
    }
    if (e.name().find('/') != std::string::npos) {
      return bad(StrCat("endpoint name '", e.name(), "' has a '/'"));
    }
    // The field says what the endpoint is; the host goes by the address's
    // shape: they must agree.
    if (!e.server().empty() && !IsServerAddress(e.server())) {
      return bad(StrCat("endpoint ", e.name(), ": server '", e.server(),
                        "' is not HOST:PORT (a directory is dir:)"));
    }
    if (!e.dir().empty() && IsServerAddress(e.dir())) {
      return bad(StrCat("endpoint ", e.name(), ": dir '", e.dir(),
                        "' reads as HOST:PORT (a server is server:; a "
                        "directory of that name: ./",
                        e.dir(), ")"));
    }
  }
  {
    std::set<std::string> names;
    for (const auto& st : c.stage()) {
      if (absl::Status s = CheckStageName(st.name()); !s.ok()) {
        return bad(std::string(s.message()));
      }
      if (st.kind().empty()) {
        return bad(StrCat("stage ", st.name(), ": no kind"));
      }
      if (!names.insert(st.name()).second) {
        return bad(StrCat("stage ", st.name(), " is declared twice"));
      }
    }
  }
  if (c.has_poll_us() && c.poll_us() > 100000) {
    return bad("poll_us: at most 100000");
  }
  if (c.has_remote_timeout_ms() &&
      (c.remote_timeout_ms() < 1 || c.remote_timeout_ms() > 3600000)) {
    return bad("remote_timeout_ms: must be in 1..3600000");
  }
  if (c.has_controller_timeout_ms() &&
      (c.controller_timeout_ms() < 1 || c.controller_timeout_ms() > 3600000)) {
    return bad("controller_timeout_ms: must be in 1..3600000");
  }
  if (c.has_passthrough_wait_ms() && c.passthrough_wait_ms() > 3600000) {
    return bad("passthrough_wait_ms: must be in 0..3600000");
  }
  if (c.has_io_threads() && (c.io_threads() < 1 || c.io_threads() > 64)) {
    return bad("io_threads: must be in 1..64");
  }
  if (c.has_io_threads() && c.io_threads() > 1 && c.has_poll_us() &&
      c.poll_us() > 0) {
    return bad(StrCat("io_threads: ", c.io_threads(),
                      " with poll_us > 0: a polling network thread runs "
                      "alone (poll_us: 0 for several threads)"));
  }
  if (c.has_metrics_rules() && c.metrics_rules() > 100000) {
    return bad("metrics_rules: must be in 0..100000");
  }
  // Fields of the other daemon are refused, not ignored: a server config
  // given to sroute-fuse is a mistake the user wants to hear about.
  auto only = [&](bool set, std::string_view field, HostKind owner) {
    return set && kind != owner
               ? bad(StrCat(field, ": only for sroute-", HostKindName(owner)))
               : absl::OkStatus();
  };
  const HostKind F = HostKind::kFuse, S = HostKind::kServer;
  for (const absl::Status& s :
       {only(!c.backing().empty(), "backing", F),
        only(c.tenant_size() > 0, "tenant", F),
        only(!c.kernel_cache().empty(), "kernel_cache", F),
        only(c.fuse_option_size() > 0, "fuse_option", F),
        only(c.threads() != 0, "threads", F), only(c.has_nice(), "nice", F),
        only(c.has_io_uring(), "io_uring", F),
        only(!c.passthrough().empty(), "passthrough", F),
        only(c.has_passthrough_wait_ms(), "passthrough_wait_ms", F),
        only(!c.root().empty(), "root", S),
        only(!c.listen().empty(), "listen", S)}) {
    if (!s.ok()) return s;
  }
  if (kind == HostKind::kFuse) {
    if (!c.kernel_cache().empty() && c.kernel_cache() != "off" &&
        c.kernel_cache() != "auto") {
      return bad(StrCat("kernel_cache must be \"off\" or \"auto\", not \"",
                        c.kernel_cache(), "\""));
    }
    if (!c.passthrough().empty() && c.passthrough() != "off" &&
        c.passthrough() != "auto") {
      return bad(StrCat("passthrough must be \"off\" or \"auto\", not \"",
                        c.passthrough(), "\""));
    }
    for (const auto& t : c.tenant()) {
      if (t.name().empty() ||
          t.who_case() == proto::HostConfig::Tenant::WHO_NOT_SET) {
        return bad("every tenant needs a name and a uid, gid or cgroup");
      }
    }
    if (c.threads() > 1024) return bad("threads: at most 1024");
    if (c.has_nice() && (c.nice() < -20 || c.nice() > 19)) {
      return bad(StrCat("nice: must be in -20..19, not ", c.nice()));
    }
  } else if (!c.name().empty() && c.name().find('/') != std::string::npos) {
    return bad(StrCat("bad server name '", c.name(), "'"));
  }
  return absl::OkStatus();
}

proto::HostConfig MergeHostConfig(proto::HostConfig base,
                                  const proto::HostConfig& overlay) {
  // Protobuf's merge is exactly the rule: repeated fields append, set
  // singular fields (non-default, or present for optional ones) replace.
  base.MergeFrom(overlay);
  return base;
}

}  // namespace sroute

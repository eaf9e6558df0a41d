// SPDX-License-Identifier: Apache-2.0
// EmbeddedHost: an sSwitch with its endpoints and stages, usable from C++
// without FUSE or a controller (the embedding API).
//
//   sroute::EmbeddedHost host("demo");
//   host.AddLocalEndpoint("S1", "/srv/a");
//   host.AddLocalEndpoint("S2", "/srv/b");
//   host.LoadRules("<*, w|c, //S1/logs/*> -> <IO, //S2/logs/*>");
//   host.Write("alice", "//S1/logs/today", 0, bytes);
//
// Thread safety: thread-safe, like the SSwitch it holds.
#ifndef SROUTE_EMBED_EMBEDDED_HOST_H_
#define SROUTE_EMBED_EMBEDDED_HOST_H_

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "endpoints/local_endpoint.h"
#include "sswitch/sswitch.h"

namespace sroute {

class EmbeddedHost {
 public:
  explicit EmbeddedHost(std::string name);
  ~EmbeddedHost();

  SSwitch& sswitch() { return sswitch_; }

  // A directory as endpoint NAME (files //NAME/PATH).
  absl::Status AddLocalEndpoint(const std::string& name,
                                const std::string& root);
  absl::Status AddEndpoint(const std::string& name,
                           std::shared_ptr<Endpoint> endpoint);
  absl::Status AddStage(const std::string& name, std::shared_ptr<Stage> stage);

  // Installs every rule of `text` atomically, or none: errors read
  // "ORIGIN:LINE:COL: reason" (parse) or "ORIGIN:LINE: reason" (install).
  absl::Status LoadRules(std::string_view text,
                         std::string_view origin = "<rules>",
                         std::string owner = "");
  absl::Status LoadRulesFile(const std::string& path);
  // Replaces the rules LoadRulesFile(path) installed with the file's rules
  // now, in one atomic update; on a bad file (errors as LoadRules) or a
  // refused rule the old ones stay. Returns how many rules it holds now.
  absl::StatusOr<size_t> ReloadRulesFile(const std::string& path);

  // Routes `io` and waits for its completion; returns io.status.
  // REQUIRES: no completion set on `io` (Submit sets its own).
  absl::Status Submit(Io& io);

  // Synchronous conveniences.
  absl::StatusOr<size_t> Read(std::string_view source, std::string_view file,
                              uint64_t offset, std::span<char> buffer);
  absl::StatusOr<size_t> Write(std::string_view source, std::string_view file,
                               uint64_t offset, std::span<const char> data);
  // Runs `op` (no payload) on `file`, e.g. Op::kMkdir with args.mode.
  absl::StatusOr<struct stat> Call(std::string_view source, Op op,
                                   std::string_view file, IoArgs args = {});

 private:
  SSwitch sswitch_;
};

}  // namespace sroute

#endif  // SROUTE_EMBED_EMBEDDED_HOST_H_

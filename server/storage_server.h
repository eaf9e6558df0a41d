// SPDX-License-Identifier: Apache-2.0
// StorageServer: the host behind `sroute-server` (docs/design.md §7): a
// directory exported as endpoint NAME (files //NAME/PATH), its own sSwitch
// with server-side rules (forwarding to other servers, stages), and an RPC
// front end that serves the data plane (IOs from other hosts' remote
// endpoints), the control plane (rules, quiesce, drain, stats) and the
// delegate-rule records stored with the IOs (server/record_store.h).
//
// Thread safety: thread-safe.
#ifndef SROUTE_SERVER_STORAGE_SERVER_H_
#define SROUTE_SERVER_STORAGE_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "embed/embedded_host.h"
#include "proto/config.pb.h"
#include "rpc/frame.h"

namespace sroute {

class RecordStore;
class RpcServer;

// What a server needs beside its HostConfig (host/config.h): name, root,
// listen, state_dir, endpoints, rules, controller, control socket, threads
// and timeouts all come from the config.
struct StorageServerExtras {
  // The cluster secret; empty: read the config's secret_file.
  std::string secret;
  FrameLimits limits;
};

class StorageServer {
 public:
  // Builds the host (host/runtime.h), opens the state store, starts
  // listening, registers with the controller if the config names one, and
  // serves the control socket if it names one. Errors name what is wrong (a
  // bad rule as FILE:LINE:COL).
  static absl::StatusOr<std::unique_ptr<StorageServer>> Start(
      const proto::HostConfig& config, StorageServerExtras extras = {});
  // Stops serving and waits (a few seconds at most) for IOs in flight.
  ~StorageServer();
  StorageServer(const StorageServer&) = delete;
  StorageServer& operator=(const StorageServer&) = delete;

  const std::string& name() const;
  uint16_t port() const;
  std::string address() const;
  EmbeddedHost& host();
  // SIGHUP: HostRuntime::ReloadRulesFile.
  absl::StatusOr<size_t> ReloadRulesFile();
  RecordStore& records();

 private:
  struct Impl;
  explicit StorageServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_SERVER_STORAGE_SERVER_H_

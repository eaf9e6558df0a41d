// StorageServer: the host behind `sroute-server` (DESIGN.md §7): a
// directory exported as endpoint NAME (files //NAME/PATH), its own sSwitch
// with server-side rules (forwarding to other servers, stages), and an RPC
// front end that serves the data plane (IOs from other hosts' remote
// endpoints), the control plane (rules, quiesce, drain, stats) and the
// delegate-rule records stored with the IOs (server/record_store.h).
//
// Thread safety: thread-safe.
#ifndef SROUTE_SERVER_STORAGE_SERVER_H_
#define SROUTE_SERVER_STORAGE_SERVER_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/frame.h"
#include "sswitch/host.h"

namespace sroute {

class RecordStore;
class RpcServer;

struct StorageServerOptions {
  std::string name = "server";  // the endpoint name of the root
  std::string root;             // the exported directory
  std::string listen = "127.0.0.1:7400";
  std::string secret;     // the cluster secret
  std::string state_dir;  // RocksDB; default ROOT/.sroute/state
  std::string rules_file;
  std::vector<std::string> rules;      // more rules, after the file's
  std::vector<std::string> endpoints;  // NAME=DIR or NAME=HOST:PORT
  int io_threads = 2;
  // > 0: the network thread busy-polls this long after each event before it
  // sleeps (rpc/io_threads.h: lower latency for CPU; one network thread).
  std::chrono::microseconds poll_window{0};
  absl::Duration remote_timeout = absl::Seconds(10);
  // Register with the controller at HOST:PORT (empty: no controller). Its
  // rules are in place before the server answers its first request.
  std::string controller;
  FrameLimits limits;
};

class StorageServer {
 public:
  // Opens the root and the state store, installs the rules and starts
  // listening. Errors name what is wrong (a bad rule as FILE:LINE:COL).
  static absl::StatusOr<std::unique_ptr<StorageServer>> Start(
      StorageServerOptions options);
  // Stops serving and waits (a few seconds at most) for IOs in flight.
  ~StorageServer();
  StorageServer(const StorageServer&) = delete;
  StorageServer& operator=(const StorageServer&) = delete;

  const std::string& name() const;
  uint16_t port() const;
  std::string address() const;
  Host& host();
  RecordStore& records();

 private:
  struct Impl;
  explicit StorageServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_SERVER_STORAGE_SERVER_H_

// SPDX-License-Identifier: Apache-2.0
// RemoteEndpoint: an endpoint that is a storage server (sroute-server)
// reached over the RPC (rpc/channel.h). Files //NAME/PATH of the endpoint
// are PATH beneath the server's root; the server's own sSwitch routes them
// on from there.
//
// A dead, slow or unreachable server fails IOs within the timeout: EIO when
// the server cannot be reached or the connection is lost, ETIMEDOUT when it
// does not answer in time; the caller never hangs.
//
// Thread safety: thread-safe.
#ifndef SROUTE_ENDPOINTS_REMOTE_ENDPOINT_H_
#define SROUTE_ENDPOINTS_REMOTE_ENDPOINT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "rpc/channel.h"
#include "sswitch/endpoint.h"
#include "sswitch/sswitch.h"

namespace sroute {

class RemoteEndpoint : public Endpoint {
 public:
  struct Options {
    std::string address;     // HOST:PORT of the server
    std::string secret;      // the cluster secret
    std::string local_name;  // this host's name, for the server's logs
    std::string role = "host";
    absl::Duration timeout = absl::Seconds(10);  // per IO
    int connections = 2;
  };
  // Does not connect yet: the first IO does (so a host can start while a
  // server is down). REQUIRES: `threads` outlives the endpoint.
  static absl::StatusOr<std::shared_ptr<RemoteEndpoint>> Create(
      IoThreads* threads, Options options);
  ~RemoteEndpoint() override;

  void Submit(Io* io, std::string_view path) override;
  void SubmitToStage(Io* io, std::string_view path,
                     std::string_view stage) override;

  RpcChannel& channel() { return *channel_; }
  const std::string& address() const { return channel_->address(); }
  std::string Describe() const override { return address(); }

 private:
  RemoteEndpoint(std::unique_ptr<RpcChannel> channel, absl::Duration timeout,
                 std::string local_name);
  // Submit, to the server's `stage` if not empty.
  void Send(Io* io, std::string_view path, std::string_view stage);

  std::unique_ptr<RpcChannel> channel_;
  const std::string local_name_;
  const absl::Duration timeout_;
  const uint64_t dev_salt_;  // keeps st_dev of different servers apart
};

// What remote endpoints of a host need: io threads, the secret, a name.
struct RemoteContext {
  IoThreads* threads = nullptr;
  std::string secret;  // empty: remote endpoints are refused
  std::string local_name;
  std::string role = "host";
  absl::Duration timeout = absl::Seconds(10);
};

// True when `where` names a server (HOST:PORT) rather than a directory.
bool IsServerAddress(std::string_view where);

// Adds endpoint `name` to `sswitch`: a local directory, or a remote server when
// `where` is HOST:PORT (which needs `remote.secret`).
absl::Status AddEndpoint(SSwitch& sswitch, const std::string& name,
                         const std::string& where, const RemoteContext& remote);
// The same from "NAME=DIR" or "NAME=HOST:PORT".
absl::Status AddEndpointSpec(SSwitch& sswitch, const std::string& spec,
                             const RemoteContext& remote);

}  // namespace sroute

#endif  // SROUTE_ENDPOINTS_REMOTE_ENDPOINT_H_

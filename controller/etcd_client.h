// SPDX-License-Identifier: Apache-2.0
// EtcdClient: etcd's v3 API (Debian's etcd-server 3.4) as JSON through
// etcd's gRPC gateway, over HTTP/1.1 with Boost.Beast: what the controller's
// etcd store and its leader election need (controller/kv.h,
// controller/leadership.h), with no gRPC dependency.
//
// A client keeps one keep-alive connection, to one member at a time, and
// makes one call at a time. A member that cannot be connected to, does not
// answer within the timeout, or answers "unavailable" is left for the next
// one (round the list, each member tried once per call); the call fails
// with UNAVAILABLE naming every member and why when none answered. A call
// that timed out may still have been applied: callers only send writes that
// are safe to apply twice (puts and deletes of given values, fenced by a
// comparison).
//
// Errors etcd itself returns keep their gRPC code (the same numbers as
// absl::StatusCode) and etcd's message.
//
// Thread safety: thread-safe; calls are serialized (a mutex held across the
// HTTP exchange, a leaf). Use one client per thread that must not wait
// behind another's calls (the leadership's keep-alive has its own).
#ifndef SROUTE_CONTROLLER_ETCD_CLIENT_H_
#define SROUTE_CONTROLLER_ETCD_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/etcd.pb.h"

namespace sroute {

class EtcdClient {
 public:
  struct Options {
    // Members' client addresses, "HOST:PORT" (an "http://" before is
    // accepted); HOST is an IP address.
    std::vector<std::string> endpoints;
    // How long one member may take to answer one call.
    absl::Duration timeout = absl::Seconds(2);
  };
  // Fails (INVALID_ARGUMENT) on an empty list or a malformed address; does
  // not connect yet.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(Options options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  absl::StatusOr<etcd::RangeResponse> Range(const etcd::RangeRequest& req);
  absl::StatusOr<etcd::TxnResponse> Txn(const etcd::TxnRequest& req);
  absl::StatusOr<etcd::PutResponse> Put(const etcd::PutRequest& req);
  absl::StatusOr<etcd::DeleteRangeResponse> DeleteRange(
      const etcd::DeleteRangeRequest& req);
  absl::StatusOr<etcd::LeaseGrantResponse> LeaseGrant(int64_t ttl_seconds);
  // TTL 0 in the answer: the lease is gone.
  absl::StatusOr<etcd::LeaseKeepAliveResponse> LeaseKeepAlive(int64_t id);
  absl::Status LeaseRevoke(int64_t id);
  absl::StatusOr<etcd::MemberListResponse> MemberList();
  // The status of the member at `endpoint` itself (one of endpoints()).
  absl::StatusOr<etcd::StatusResponse> MemberStatus(
      const std::string& endpoint);

  const std::vector<std::string>& endpoints() const;

  struct Impl;

 private:
  explicit EtcdClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The range_end that, with `prefix` as the key, selects every key that
// starts with `prefix` (etcd's "prefix" option).
std::string EtcdPrefixEnd(std::string prefix);

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_ETCD_CLIENT_H_

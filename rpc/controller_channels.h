// SPDX-License-Identifier: Apache-2.0
// ControllerChannels: the channels a host (host/agent.h) or a client
// (controller/client.h) keeps to the controllers that share a store, and
// the one it talks to now.
//
// Calls go to current(). After a call to channel `from` failed, Follow
// moves on: to the leader a follower named (rpc/leader.h; a channel is
// added when that address is not in the list), or, when the controller
// could not be reached or did not answer in time, to the next address. Any
// other error stays: the controller answered, and it decides.
//
//   addresses A,B          call -> A: UNAVAILABLE "does not lead; the
//   current A                      leader is at C"
//                          Follow(A, that) -> channel C added, current C
//                          call -> C: UNAVAILABLE (gone)
//                          Follow(C, that) -> current A (the next one)
//
// Channels are only added, never removed: a reference or pointer to one
// stays valid as long as this object.
//
// Thread-safe. Follow moves only from `from`: of two callers that saw the
// same failure, one moves and the other finds the move made.
#ifndef SROUTE_RPC_CONTROLLER_CHANNELS_H_
#define SROUTE_RPC_CONTROLLER_CHANNELS_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "rpc/channel.h"
#include "util/mutex.h"

namespace sroute {

class ControllerChannels {
 public:
  // A channel to each address of `addresses` (comma-separated), made from
  // `base` with its address set; the first is current. No connection is
  // made here. InvalidArgument when the list is empty; a channel's error
  // names its address.
  static absl::StatusOr<std::unique_ptr<ControllerChannels>> Create(
      IoThreads* threads, std::string_view addresses,
      const RpcChannel::Options& base);

  size_t size() const;
  size_t current_index() const { return current_.load(); }
  RpcChannel& at(size_t i);
  RpcChannel& current() { return at(current_index()); }
  std::string address(size_t i) const;
  std::string current_address() const { return address(current_index()); }
  // Every channel (to shut them down without holding anything: their
  // calls' callbacks may come back here).
  std::vector<RpcChannel*> All() const;

  // Makes channel `i` current.
  // REQUIRES: i < size().
  void Select(size_t i) { current_.store(i); }

  // After a call to channel `from` failed with `why`: when `why` calls for
  // a move, the index now current if it is no longer `from` (moved by this
  // call, or already by another); nullopt when nothing moves (an answer
  // that is not an absence, a follower that knows no leader yet, a single
  // address, a leader's address that makes no channel).
  std::optional<size_t> Follow(size_t from, const absl::Status& why);

 private:
  ControllerChannels(IoThreads* threads, const RpcChannel::Options& base)
      : threads_(threads), base_(base) {}
  absl::Status Add(std::string_view address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  IoThreads* const threads_;
  const RpcChannel::Options base_;
  // Guards addresses_ and channels_. A leaf.
  mutable Mutex mu_;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<RpcChannel>> channels_ ABSL_GUARDED_BY(mu_);
  std::atomic<size_t> current_{0};
};

}  // namespace sroute

#endif  // SROUTE_RPC_CONTROLLER_CHANNELS_H_

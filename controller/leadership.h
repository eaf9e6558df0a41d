// SPDX-License-Identifier: Apache-2.0
// Leadership: leader election among controllers that share an etcd store
// (controller/kv.h), on an etcd lease.
//
// Each member grants itself a lease of `ttl` and keeps it alive (every
// ttl/4); it lists itself under PREFIX"members/"ID (its address) with that
// lease, and campaigns by creating PREFIX"leader" (its id and address) with
// the lease, in a transaction that succeeds only if no such key exists. The
// member that created the key leads until its lease ends: it stops, dies,
// pauses or loses etcd for a TTL, etcd deletes the key and the others
// campaign within a tick.
//
// The leadership is the key's create_revision: the store is fenced with it
// (EtcdKv::SetFence), so a leader that lost its lease writes nothing even
// before it notices. A member notices within a tick, or when a keep-alive
// has failed for a whole TTL (it cannot know the lease still holds), and
// then calls `lost` once, gives its lease back as soon as etcd answers (its
// key must not hold off the others) and never leads again (the daemon exits
// and its supervisor starts it again as a follower: nothing of an old
// leadership survives into a new one).
//
// Thread safety: thread-safe. The callbacks run on the leadership's thread;
// `elected` may take its time (the lease is kept alive meanwhile by that
// thread's next tick only after it returns, so it should take less than
// the TTL).
#ifndef SROUTE_CONTROLLER_LEADERSHIP_H_
#define SROUTE_CONTROLLER_LEADERSHIP_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "controller/etcd_client.h"

namespace sroute {

class Leadership {
 public:
  struct Options {
    std::string prefix;   // e.g. "/sroute/"
    std::string id;       // unique among the members
    std::string address;  // where hosts and clients reach this member
    absl::Duration ttl = absl::Seconds(3);  // whole seconds, at least 1
    // Called once this member leads, with the leadership's revision; false
    // if it cannot take over (the leadership is then lost: `lost` is called
    // and the lease given back, so another member leads).
    std::function<bool(int64_t revision)> elected;
    // Called once when a leadership is gone.
    std::function<void(const std::string& why)> lost;
  };
  // Grants the lease and lists the member; campaigns in the background.
  static absl::StatusOr<std::unique_ptr<Leadership>> Start(
      EtcdClient::Options etcd, Options options);
  // Revokes the lease: a leader going away hands over at once.
  ~Leadership();

  bool leading() const;
  // The leader's address as last read ("" if none known), and whether the
  // member itself leads.
  std::string leader_address() const;
  // The etcd key a leader holds (to fence the store with).
  std::string leader_key() const;

  struct Member {
    std::string id;
    std::string address;
    bool leader = false;
  };
  // The members alive now (their leases hold).
  absl::StatusOr<std::vector<Member>> Members();

  struct Impl;

 private:
  explicit Leadership(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_CONTROLLER_LEADERSHIP_H_

// SPDX-License-Identifier: Apache-2.0
// KvStore on etcd: the state of several controllers, one leading, in a
// replicated store (controller/kv.h).
#include "absl/strings/str_join.h"
#include "controller/etcd_client.h"
#include "controller/kv.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

// Keys per Range call: a bounded answer whatever the store holds.
constexpr int64_t kPage = 1000;

}  // namespace

struct EtcdKv::State {
  EtcdClient* client;
  std::string prefix;
  size_t max_txn_ops;
  Mutex mu;
  std::string fence_key ABSL_GUARDED_BY(mu);
  int64_t fence_revision ABSL_GUARDED_BY(mu) = 0;
};

EtcdKv::EtcdKv(EtcdClient* client, std::string prefix, size_t max_txn_ops)
    : state_(new State{client, std::move(prefix), max_txn_ops, {}, {}, 0}) {}

EtcdKv::~EtcdKv() = default;

void EtcdKv::SetFence(std::string fence_key, int64_t create_revision) {
  MutexLock l(&state_->mu);
  state_->fence_key = std::move(fence_key);
  state_->fence_revision = create_revision;
}

absl::StatusOr<std::optional<std::string>> EtcdKv::Get(
    const std::string& key) const {
  etcd::RangeRequest req;
  req.set_key(state_->prefix + key);
  auto r = state_->client->Range(req);
  if (!r.ok()) return r.status();
  if (r->kvs_size() == 0) return std::nullopt;
  return r->kvs(0).value();
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> EtcdKv::Scan(
    const std::string& prefix, bool keys_only) const {
  std::vector<std::pair<std::string, std::string>> out;
  const std::string full = state_->prefix + prefix;
  etcd::RangeRequest req;
  req.set_key(full);
  req.set_range_end(EtcdPrefixEnd(full));
  req.set_limit(kPage);
  req.set_keys_only(keys_only);
  while (true) {
    auto r = state_->client->Range(req);
    if (!r.ok()) return r.status();
    // Later pages at the first page's revision: one consistent view.
    if (req.revision() == 0) req.set_revision(r->header().revision());
    for (const etcd::KeyValue& kv : r->kvs()) {
      out.emplace_back(kv.key().substr(state_->prefix.size()), kv.value());
    }
    if (!r->more() || r->kvs_size() == 0) break;
    std::string next = r->kvs(r->kvs_size() - 1).key();
    next.push_back('\0');
    req.set_key(next);
  }
  return out;
}

absl::Status EtcdKv::Apply(const std::vector<Write>& writes, bool) {
  if (writes.size() > state_->max_txn_ops) {
    return absl::InvalidArgumentError(StrCat(
        "a change of ", writes.size(), " keys is more than etcd takes in one ",
        "transaction (", state_->max_txn_ops, "; etcd's --max-txn-ops and ",
        "the controller's --etcd-max-txn-ops raise it); nothing written"));
  }
  etcd::TxnRequest req;
  {
    MutexLock l(&state_->mu);
    if (state_->fence_revision == 0) {
      return absl::FailedPreconditionError(
          "this controller does not lead: only the leader writes to the "
          "store; nothing written");
    }
    etcd::Compare* c = req.add_compare();
    c->set_key(state_->fence_key);
    c->set_target(etcd::Compare::CREATE);
    c->set_result(etcd::Compare::EQUAL);
    c->set_create_revision(state_->fence_revision);
  }
  for (const Write& w : writes) {
    etcd::RequestOp* op = req.add_success();
    if (w.value) {
      op->mutable_request_put()->set_key(state_->prefix + w.key);
      op->mutable_request_put()->set_value(*w.value);
    } else {
      op->mutable_request_delete_range()->set_key(state_->prefix + w.key);
    }
  }
  auto r = state_->client->Txn(req);
  if (!r.ok()) return r.status();
  if (!r->succeeded()) {
    return absl::FailedPreconditionError(
        "this controller's leadership is gone (another controller leads "
        "now); nothing written");
  }
  return absl::OkStatus();
}

std::string EtcdKv::Describe() const {
  return StrCat("etcd://", absl::StrJoin(state_->client->endpoints(), ","),
                state_->prefix);
}

}  // namespace sroute

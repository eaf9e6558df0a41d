// SPDX-License-Identifier: Apache-2.0
// ControllerStore on both engines (controller/kv.h): RocksDB in a directory
// and a real etcd (one member, started by the suite), read directly or
// through the leader's in-memory copy (CachedKv). Many writers at once
// (the controller registers hosts, applies rule changes and stores app
// state from several threads): every write is there afterwards (under TSan,
// no race reported); stages per sSwitch; what was written is there when the
// store is opened again. Then what only etcd does: fencing, its transaction
// limit, scans longer than a page.
#include "controller/store.h"

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controller/etcd_client.h"
#include "controller/kv.h"
#include "gtest/gtest.h"
#include "tests/util/etcd_cluster.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::EtcdCluster;
using ::sroute::testing::TempDir;

// One etcd member for the whole binary (stopped at exit); each test works
// under a prefix of its own.
EtcdCluster& Etcd() {
  static EtcdCluster cluster(1);
  return cluster;
}

EtcdClient* Client() {
  static std::unique_ptr<EtcdClient> client = [] {
    EtcdClient::Options o;
    o.endpoints = Etcd().member_endpoints();
    return *EtcdClient::Create(o);
  }();
  return client.get();
}

class EtcdPrefix {
 protected:
  EtcdPrefix() {
    static int n = 0;
    prefix_ = "/store-test-" + std::to_string(++n) + "/";
  }

  // The create_revision of this test's leader key (created once).
  int64_t FenceRevision() {
    etcd::RangeRequest get;
    get.set_key(prefix_ + "leader");
    auto r = client_->Range(get);
    if (r.ok() && r->kvs_size() > 0) return r->kvs(0).create_revision();
    etcd::PutRequest put;
    put.set_key(prefix_ + "leader");
    put.set_value("test");
    auto p = client_->Put(put);
    return p.ok() ? p->header().revision() : -1;
  }

  EtcdClient* client_ = Client();
  std::string prefix_;
};

class ControllerStoreTest : public ::testing::TestWithParam<std::string>,
                            public EtcdPrefix {
 protected:
  void SetUp() override {
    if (GetParam() != "rocksdb") {
      ASSERT_TRUE(Etcd().ok());
    }
  }

  // The store as this test's engine opens it (again: the same data).
  std::unique_ptr<ControllerStore> Open() {
    if (GetParam() == "rocksdb") {
      auto s = ControllerStore::Open(dir_.path());
      EXPECT_TRUE(s.ok()) << s.status();
      return s.ok() ? *std::move(s) : nullptr;
    }
    auto kv = std::make_unique<EtcdKv>(client_, prefix_ + "state/");
    kv->SetFence(prefix_ + "leader", FenceRevision());
    auto s =
        GetParam() == "etcd-cached"
            ? ControllerStore::Open(std::make_unique<CachedKv>(std::move(kv)))
            : ControllerStore::Open(std::move(kv));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }

  TempDir dir_;
};

TEST_P(ControllerStoreTest, ConcurrentWritersAllLand) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  const int kEach = GetParam() == "rocksdb" ? 20 : 5;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string name =
            "host-" + std::to_string(t) + "-" + std::to_string(i);
        proto::HostInfo host;
        host.set_sswitch(name);
        host.set_role("fuse");
        EXPECT_TRUE(store->PutHost(host).ok());
        EXPECT_TRUE(store->PutAppState("app", name, name).ok());
        auto cid = store->NextCids(1);
        ASSERT_TRUE(cid.ok()) << cid.status();
        proto::ManagedRule rule;
        rule.set_cid(*cid);
        rule.set_text("* * //" + name + " -> //home/x");
        EXPECT_TRUE(store->Apply({{name, {rule}, {}}}, *cid).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  store.reset();
  store = Open();  // what a new leader reads
  ASSERT_NE(store, nullptr);
  auto hosts = store->Hosts();
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_EQ(hosts->size(), size_t(kThreads * kEach));
  auto names = store->SSwitches();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(names->size(), size_t(kThreads * kEach));
  std::set<uint64_t> cids;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      const std::string name =
          "host-" + std::to_string(t) + "-" + std::to_string(i);
      EXPECT_TRUE(*store->Known(name));
      auto state = store->GetAppState("app", name);
      ASSERT_TRUE(state.ok()) << state.status();
      EXPECT_EQ(*state, name);
      auto rules = store->Rules(name);
      ASSERT_TRUE(rules.ok()) << rules.status();
      ASSERT_EQ(rules->size(), 1u);
      EXPECT_EQ(*store->SSwitchOf((*rules)[0].cid()), name);
      EXPECT_TRUE(cids.insert((*rules)[0].cid()).second) << "a cid twice";
    }
  }
  EXPECT_FALSE(*store->Known("nobody"));
  EXPECT_EQ(*store->SSwitchOf(999999), std::nullopt);
  EXPECT_TRUE(absl::IsNotFound(store->GetAppState("app", "none").status()));
}

// Stages per sSwitch: kept by name (a put replaces), listed per sSwitch
// only (a name that is another's prefix is not mixed in), and still there
// when the store is opened again; so are the version and the epoch.
TEST_P(ControllerStoreTest, StagesVersionAndEpochAreDurable) {
  auto stage = [](const std::string& name, uint64_t bytes) {
    proto::StageConfig c;
    c.set_name(name);
    c.set_kind("cache");
    c.mutable_cache()->set_partition_bytes(bytes);
    return c;
  };
  {
    auto store = Open();
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->PutStage("a", stage("c1", 1)).ok());
    ASSERT_TRUE(store->PutStage("a", stage("c2", 2)).ok());
    ASSERT_TRUE(store->PutStage("a", stage("c1", 3)).ok());
    ASSERT_TRUE(store->PutStage("ab", stage("c9", 9)).ok());
    ASSERT_TRUE(store->DeleteStage("a", "c2").ok());
    EXPECT_EQ(*store->NextEpoch(), 1u);
    ASSERT_TRUE(store->Apply({}, 7).ok());
    EXPECT_EQ(store->version(), 7u);
  }
  auto store = Open();
  ASSERT_NE(store, nullptr);
  auto a = store->Stages("a");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 1u);
  EXPECT_EQ((*a)[0].name(), "c1");
  EXPECT_EQ((*a)[0].cache().partition_bytes(), 3u);
  ASSERT_EQ(store->Stages("ab")->size(), 1u);
  EXPECT_TRUE(store->Stages("b")->empty());
  EXPECT_EQ(store->version(), 7u);
  EXPECT_EQ(*store->NextEpoch(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Engines, ControllerStoreTest,
                         ::testing::Values("rocksdb", "etcd", "etcd-cached"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::erase(name, '-');
                           return name;
                         });

class EtcdStoreTest : public ::testing::Test, public EtcdPrefix {
 protected:
  void SetUp() override { ASSERT_TRUE(Etcd().ok()); }
  std::unique_ptr<ControllerStore> Open() {
    auto kv = std::make_unique<EtcdKv>(client_, prefix_ + "state/");
    kv->SetFence(prefix_ + "leader", FenceRevision());
    auto s = ControllerStore::Open(std::move(kv));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
};

// A store fenced by a leadership writes only while that leadership holds:
// once the leader key is gone (or another's), nothing is written, and the
// error says why; an unfenced store refuses to write at all.
TEST_F(EtcdStoreTest, WritesOnlyWhileTheLeadershipHolds) {
  auto store = Open();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->PutAppState("app", "k", "v1").ok());
  // Another controller's leadership replaces ours.
  etcd::DeleteRangeRequest del;
  del.set_key(prefix_ + "leader");
  ASSERT_TRUE(client_->DeleteRange(del).ok());
  etcd::PutRequest put;
  put.set_key(prefix_ + "leader");
  put.set_value("another");
  ASSERT_TRUE(client_->Put(put).ok());
  absl::Status s = store->PutAppState("app", "k", "v2");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("leadership is gone"), std::string::npos) << s;
  proto::ManagedRule rule;
  rule.set_cid(1);
  rule.set_text("<*, *, //a/*> -> <IO, //b/*>");
  EXPECT_TRUE(absl::IsFailedPrecondition(store->Apply({{"s", {rule}, {}}}, 5)));
  EXPECT_EQ(*store->GetAppState("app", "k"), "v1");
  EXPECT_TRUE(store->Rules("s")->empty());
  EXPECT_EQ(store->version(), 0u);
  // Unfenced: no write at all.
  EtcdKv unfenced(client_, prefix_ + "state/");
  s = unfenced.Apply({{"x", "y"}}, true);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_NE(s.message().find("does not lead"), std::string::npos) << s;
}

// One change is one etcd transaction: one larger than etcd takes is refused
// whole, with a clear error; scans read past a page.
TEST_F(EtcdStoreTest, TransactionLimitAndLongScans) {
  auto kv = std::make_unique<EtcdKv>(client_, prefix_ + "state/", 128);
  kv->SetFence(prefix_ + "leader", FenceRevision());
  std::vector<KvStore::Write> too_many;
  for (int i = 0; i < 129; ++i) {
    too_many.push_back({"k/" + std::to_string(i), "v"});
  }
  absl::Status s = kv->Apply(too_many, true);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("--max-txn-ops"), std::string::npos) << s;
  EXPECT_TRUE(kv->Scan("k/")->empty());
  // 2 500 keys in batches: a scan of three pages sees them all, in order.
  for (int b = 0; b < 25; ++b) {
    std::vector<KvStore::Write> batch;
    for (int i = 0; i < 100; ++i) {
      char key[16];
      std::snprintf(key, sizeof(key), "k/%05d", b * 100 + i);
      batch.push_back({key, std::string(key) + "=v"});
    }
    ASSERT_TRUE(kv->Apply(batch, true).ok());
  }
  auto all = kv->Scan("k/");
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2500u);
  for (int i = 0; i < 2500; ++i) {
    char key[16];
    std::snprintf(key, sizeof(key), "k/%05d", i);
    ASSERT_EQ((*all)[i].first, key);
    ASSERT_EQ((*all)[i].second, std::string(key) + "=v");
  }
  auto keys = kv->Scan("k/0001", /*keys_only=*/true);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ(keys->size(), 10u);
  EXPECT_EQ((*keys)[0].second, "");
  EXPECT_NE(kv->Describe().find("etcd://127.0.0.1:"), std::string::npos);
}

// A client given members that do not answer says which and why; one that
// answers among dead ones is found.
TEST_F(EtcdStoreTest, ClientFindsTheMemberThatAnswers) {
  const std::string dead =
      "127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  EtcdClient::Options o;
  o.endpoints = {dead};
  o.timeout = absl::Milliseconds(500);
  auto lone = EtcdClient::Create(o);
  ASSERT_TRUE(lone.ok());
  etcd::RangeRequest get;
  get.set_key("/test/ready");
  auto r = (*lone)->Range(get);
  EXPECT_TRUE(absl::IsUnavailable(r.status())) << r.status();
  EXPECT_NE(r.status().message().find(dead), std::string::npos) << r.status();
  o.endpoints = {dead, Etcd().member_endpoints()[0]};
  auto two = EtcdClient::Create(o);
  ASSERT_TRUE(two.ok());
  r = (*two)->Range(get);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->kvs_size(), 1);
  o.endpoints = {"localhost:2379"};
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Create(o).status()));
  o.endpoints = {};
  EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Create(o).status()));
}

}  // namespace
}  // namespace sroute

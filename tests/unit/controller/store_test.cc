// ControllerStore with many writers at once: the controller registers hosts,
// applies rule changes and stores app state from several threads, and every
// write must be there afterwards (and, under TSan, no race reported).
#include "controller/store.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::TempDir;

TEST(ControllerStoreTest, ConcurrentWritersAllLand) {
  TempDir dir;
  auto store = ControllerStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  constexpr int kThreads = 8;
  constexpr int kEach = 20;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string name =
            "host-" + std::to_string(t) + "-" + std::to_string(i);
        proto::HostInfo host;
        host.set_sswitch(name);
        host.set_role("fuse");
        EXPECT_TRUE((*store)->PutHost(host).ok());
        EXPECT_TRUE((*store)->PutAppState("app", name, name).ok());
        auto cid = (*store)->NextCids(1);
        ASSERT_TRUE(cid.ok()) << cid.status();
        proto::ManagedRule rule;
        rule.set_cid(*cid);
        rule.set_text("* * //" + name + " -> //home/x");
        EXPECT_TRUE((*store)->Apply({{name, {rule}, {}}}, *cid).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ((*store)->Hosts().size(), size_t{kThreads * kEach});
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      const std::string name =
          "host-" + std::to_string(t) + "-" + std::to_string(i);
      EXPECT_TRUE((*store)->Known(name));
      auto state = (*store)->GetAppState("app", name);
      ASSERT_TRUE(state.ok()) << state.status();
      EXPECT_EQ(*state, name);
      auto rules = (*store)->Rules(name);
      ASSERT_TRUE(rules.ok()) << rules.status();
      ASSERT_EQ(rules->size(), 1u);
      EXPECT_EQ((*store)->SSwitchOf((*rules)[0].cid()), name);
    }
  }
}

// Stages per sSwitch: kept by name (a put replaces), listed per sSwitch
// only (a name that is another's prefix is not mixed in), and still there
// when the store is opened again.
TEST(ControllerStoreTest, StagesArePerSSwitchAndDurable) {
  TempDir dir;
  auto stage = [](const std::string& name, uint64_t bytes) {
    proto::StageConfig c;
    c.set_name(name);
    c.set_kind("cache");
    c.mutable_cache()->set_partition_bytes(bytes);
    return c;
  };
  {
    auto store = ControllerStore::Open(dir.path());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->PutStage("a", stage("c1", 1)).ok());
    ASSERT_TRUE((*store)->PutStage("a", stage("c2", 2)).ok());
    ASSERT_TRUE((*store)->PutStage("a", stage("c1", 3)).ok());
    ASSERT_TRUE((*store)->PutStage("ab", stage("c9", 9)).ok());
    ASSERT_TRUE((*store)->DeleteStage("a", "c2").ok());
  }
  auto store = ControllerStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto a = (*store)->Stages("a");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].name(), "c1");
  EXPECT_EQ(a[0].cache().partition_bytes(), 3u);
  ASSERT_EQ((*store)->Stages("ab").size(), 1u);
  EXPECT_TRUE((*store)->Stages("b").empty());
}

}  // namespace
}  // namespace sroute

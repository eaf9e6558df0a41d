// RecordStore with many writers at once: a server stores the delegate
// records of concurrent IOs from several threads, and every record must be
// listed afterwards (and, under TSan, no race reported).
#include "server/record_store.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::TempDir;

TEST(RecordStoreTest, ConcurrentWritersAllLand) {
  TempDir dir;
  auto store = RecordStore::Open(dir.path(), "S1");
  ASSERT_TRUE(store.ok()) << store.status();
  constexpr int kThreads = 8;
  constexpr int kEach = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string sswitch = "fuse-" + std::to_string(t);
      for (int i = 1; i <= kEach; ++i) {
        DelegateRuleRecord r{sswitch, static_cast<uint64_t>(i),
                             "* * //home/f" + std::to_string(i) + " -> //b/f",
                             "anchor"};
        EXPECT_TRUE((*store)->Put({r}).ok());
        if (i % 10 == 0) {
          // Forget the oldest half as IOs complete, while others still write.
          auto n = (*store)->Forget(sswitch, i - 5);
          EXPECT_TRUE(n.ok()) << n.status();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    proto::RecordList list;
    ASSERT_TRUE((*store)->List("fuse-" + std::to_string(t), 0, 0, &list).ok());
    ASSERT_EQ(list.records_size(), 5);
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(list.records(k).seq(), static_cast<uint64_t>(kEach - 4 + k));
    }
  }
}

}  // namespace
}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// RecordStore with many writers at once: a server stores the delegate
// records of concurrent IOs from several threads, and every record must be
// listed afterwards (and, under TSan, no race reported).
#include "server/record_store.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rules/parser.h"
#include "tests/util/temp_dir.h"
#include "util/strings.h"

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

namespace sroute {
namespace {

// Replays records oldest first as Delegate::Restore does: for each byte of
// [0, size), the target of the newest record that covers it ("" if none).
std::vector<std::string> Replay(std::vector<proto::DelegateRecord> records,
                                uint64_t size) {
  std::sort(records.begin(), records.end(),
            [](const auto& x, const auto& y) { return x.seq() < y.seq(); });
  std::vector<std::string> bytes(size);
  for (const auto& r : records) {
    auto rule = ParseRule(r.rule());
    EXPECT_TRUE(rule.ok()) << r.rule();
    if (!rule.ok()) continue;
    const ByteRange& range = *rule->pattern.file.range;
    for (uint64_t i = range.start; i < range.end && i < size; ++i) {
      bytes[i] = rule->detours[0].target.file;
    }
  }
  return bytes;
}

DelegateRuleRecord Ranged(uint64_t seq, uint64_t a, uint64_t b,
                          const std::string& target,
                          const std::string& anchor = "<*, w, //S1/f>") {
  return DelegateRuleRecord{
      "fuse", seq,
      StrCat("<*, r, //S1/f[", a, ":", b, "]> -> <IO, //S2/", target, ">"),
      anchor};
}

std::vector<proto::DelegateRecord> All(RecordStore& store) {
  proto::RecordList list;
  EXPECT_TRUE(store.List("fuse", 0, 0, &list).ok());
  return {list.records().begin(), list.records().end()};
}

TEST(RecordStoreTest, ANewerRecordCutsTheOlderOnesItCovers) {
  TempDir dir;
  auto store = RecordStore::Open(dir.path(), "S1");
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<proto::DelegateRecord> everything;
  const std::vector<DelegateRuleRecord> writes = {
      Ranged(1, 0, 4000, "a"), Ranged(2, 2000, 6000, "b"),
      Ranged(3, 1000, 3000, "a"), Ranged(4, 0, 6000, "c"),
      Ranged(5, 500, 700, "d")};
  for (const DelegateRuleRecord& w : writes) {
    ASSERT_TRUE((*store)->Put({w}).ok());
    proto::DelegateRecord r;
    r.set_seq(w.seq);
    r.set_rule(w.rule);
    everything.push_back(r);
    EXPECT_EQ(Replay(All(**store), 6000), Replay(everything, 6000))
        << "after seq " << w.seq;
  }
  // [0,500) c, [500,700) d, [700,6000) c: the record of seq 4 in two pieces.
  auto left = All(**store);
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[0].seq(), 4u);
  EXPECT_EQ(left[1].seq(), 4u);
  EXPECT_EQ(left[2].seq(), 5u);
}

TEST(RecordStoreTest, AnOlderRecordArrivingLateKeepsOnlyWhatNoNewerHolds) {
  TempDir dir;
  auto store = RecordStore::Open(dir.path(), "S1");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put({Ranged(10, 100, 200, "new")}).ok());
  ASSERT_TRUE((*store)->Put({Ranged(5, 0, 300, "old")}).ok());
  auto bytes = Replay(All(**store), 300);
  EXPECT_EQ(bytes[50], "//S2/old");
  EXPECT_EQ(bytes[150], "//S2/new");
  EXPECT_EQ(bytes[250], "//S2/old");
  EXPECT_EQ((*store)->CountForTesting(), 3u);
}

TEST(RecordStoreTest, OtherFilesSourcesAndAnchorsDoNotSupersede) {
  TempDir dir;
  auto store = RecordStore::Open(dir.path(), "S1");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put({Ranged(1, 0, 100, "a")}).ok());
  ASSERT_TRUE((*store)->Put({Ranged(2, 0, 100, "a", "<*, w, //S1/*>")}).ok());
  ASSERT_TRUE((*store)
                  ->Put({DelegateRuleRecord{
                      "fuse", 3, "<alice, r, //S1/f[0:100]> -> <IO, //S2/a>",
                      "<*, w, //S1/f>"}})
                  .ok());
  ASSERT_TRUE((*store)
                  ->Put({DelegateRuleRecord{
                      "fuse", 4, "<*, r, //S1/g[0:100]> -> <IO, //S2/a>",
                      "<*, w, //S1/f>"}})
                  .ok());
  ASSERT_TRUE((*store)
                  ->Put({DelegateRuleRecord{
                      "other", 5, "<*, r, //S1/f[0:100]> -> <IO, //S2/a>",
                      "<*, w, //S1/f>"}})
                  .ok());
  EXPECT_EQ((*store)->CountForTesting(), 5u);
}

// Random records, some arriving out of order, against replaying them all;
// also after reopening (the index is rebuilt) and with paging.
TEST(RecordStoreTest, RandomRecordsReplayAsAllOfThemWould) {
  TempDir dir;
  constexpr uint64_t kSize = 512;
  std::mt19937_64 rng(7);
  std::vector<proto::DelegateRecord> everything;
  uint64_t seq = 100;
  std::set<uint64_t> used;
  for (int round = 0; round < 3; ++round) {
    auto store = RecordStore::Open(dir.path(), "S1");
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(Replay(All(**store), kSize), Replay(everything, kSize));
    for (int i = 0; i < 400; ++i) {
      const uint64_t a = rng() % kSize;
      const uint64_t b = std::min<uint64_t>(kSize, a + 1 + rng() % 64);
      // One in five arrives after newer ones (concurrent writes).
      uint64_t s = seq;
      if (rng() % 5 == 0) s = seq - 4 * (1 + rng() % 4) - 1 - rng() % 3;
      seq += 4;
      if (!used.insert(s).second) continue;
      const std::string target = StrCat("t", rng() % 3);
      DelegateRuleRecord w = Ranged(s, a, b, target);
      ASSERT_TRUE((*store)->Put({w}).ok());
      proto::DelegateRecord r;
      r.set_seq(w.seq);
      r.set_rule(w.rule);
      everything.push_back(r);
    }
    auto stored = All(**store);
    EXPECT_EQ(Replay(stored, kSize), Replay(everything, kSize));
    // Pieces never outnumber the places where the newest record changes.
    EXPECT_LE(stored.size(), kSize);
    // Paging keeps a record's pieces together and loses nothing.
    std::vector<proto::DelegateRecord> paged;
    uint64_t after = 0;
    while (true) {
      proto::RecordList page;
      ASSERT_TRUE((*store)->List("fuse", after, 7, &page).ok());
      for (const auto& r : page.records()) {
        paged.push_back(r);
        after = r.seq();
      }
      if (!page.more()) break;
    }
    EXPECT_EQ(paged.size(), stored.size());
  }
}

TEST(RecordStoreTest, ForgottenRecordsLeaveTheIndexToo) {
  TempDir dir;
  auto store = RecordStore::Open(dir.path(), "S1");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Put({Ranged(1, 0, 100, "a")}).ok());
  ASSERT_TRUE((*store)->Put({Ranged(2, 50, 60, "b")}).ok());  // cuts 1
  auto n = (*store)->Forget("fuse", 0, "<*, w, //S1/f>");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 3u);
  // Nothing left to cut: a new overlapping record lands whole.
  ASSERT_TRUE((*store)->Put({Ranged(3, 0, 100, "c")}).ok());
  auto left = All(**store);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].seq(), 3u);
  // Forget up to a seq takes every piece of it.
  ASSERT_TRUE((*store)->Put({Ranged(4, 10, 20, "d")}).ok());
  auto m = (*store)->Forget("fuse", 3);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, 2u);
  EXPECT_EQ(All(**store).size(), 1u);
}

}  // namespace
}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
#include "fuse/inode_table.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sroute {
namespace {

using ::testing::Optional;
using ::testing::UnorderedElementsAre;

constexpr uint64_t kRoot = InodeTable::kRootIno;

TEST(InodeTableTest, PathsFollowLookups) {
  InodeTable t;
  EXPECT_THAT(t.Path(kRoot), Optional(std::string("")));
  const uint64_t d = t.Remember(kRoot, "d", 1, 100);
  const uint64_t f = t.Remember(d, "f", 1, 101);
  EXPECT_NE(d, f);
  EXPECT_THAT(t.Path(f), Optional(std::string("d/f")));
  EXPECT_THAT(t.ChildPath(d, "g"), Optional(std::string("d/g")));
  EXPECT_THAT(t.Find(d, "f"), Optional(f));
  EXPECT_EQ(t.Path(9999), std::nullopt);
  // The same file found again is the same node, one more reference.
  EXPECT_EQ(t.Remember(d, "f", 1, 101), f);
  EXPECT_FALSE(t.Forget(f, 1));
  EXPECT_TRUE(t.Forget(f, 1));
  EXPECT_EQ(t.Path(f), std::nullopt);
  EXPECT_EQ(t.Find(d, "f"), std::nullopt);
}

TEST(InodeTableTest, HardLinksAreOneNodeUnderTwoNames) {
  InodeTable t;
  const uint64_t a = t.Remember(kRoot, "a", 1, 7);
  const uint64_t b = t.Remember(kRoot, "b", 1, 7);
  EXPECT_EQ(a, b);
  EXPECT_THAT(t.Path(a), Optional(std::string("a")));
  t.Unlinked(kRoot, "a");
  EXPECT_THAT(t.Path(a), Optional(std::string("b"))) << "the other name";
}

// A removed file's node stays until the kernel forgets it, while its home
// may give its inode number to a new file at once (ext4 does, for a
// directory removed and made again): the new file is another node, or the
// kernel would put it on the removed one's dead inode.
TEST(InodeTableTest, ANewFileWithARemovedOnesInodeNumberIsANewNode) {
  InodeTable t;
  const uint64_t old_d = t.Remember(kRoot, "d", 1, 100);
  t.Unlinked(kRoot, "d");  // rmdir; the kernel still holds old_d
  const uint64_t new_d = t.Remember(kRoot, "d", 1, 100);
  EXPECT_NE(new_d, old_d);
  EXPECT_THAT(t.Path(new_d), Optional(std::string("d")));
  EXPECT_THAT(t.Find(kRoot, "d"), Optional(new_d));
  EXPECT_EQ(t.Path(old_d), std::nullopt);
  // Found again, the new file is the new node; forgetting the old one
  // leaves it alone.
  EXPECT_EQ(t.Remember(kRoot, "d", 1, 100), new_d);
  EXPECT_TRUE(t.Forget(old_d, 1));
  EXPECT_EQ(t.Remember(kRoot, "d", 1, 100), new_d);
  EXPECT_THAT(t.Path(new_d), Optional(std::string("d")));
  EXPECT_FALSE(t.Forget(new_d, 2));
  EXPECT_TRUE(t.Forget(new_d, 1));
  EXPECT_EQ(t.size(), 1u);  // the root
  // The same after a rename over the name, and after an unlinked open
  // file's hidden name is gone.
  const uint64_t a = t.Remember(kRoot, "a", 1, 200);
  const uint64_t b = t.Remember(kRoot, "b", 1, 201);
  t.Renamed(kRoot, "b", kRoot, "a");  // a's file is gone
  EXPECT_NE(t.Remember(kRoot, "c", 1, 200), a);
  const uint64_t f = t.Remember(kRoot, "f", 1, 300);
  t.Opened(f);
  EXPECT_EQ(t.Hide(f, kRoot, "f", kRoot, ".sroute/unlinked/1"), std::nullopt);
  EXPECT_TRUE(t.Released(f).has_value());
  EXPECT_NE(t.Remember(kRoot, "f", 1, 300), f);
  EXPECT_THAT(t.Path(b), Optional(std::string("a")));
}

TEST(InodeTableTest, RenamesAndExchangesMoveNamesAndBumpTheGeneration) {
  InodeTable t;
  const uint64_t d = t.Remember(kRoot, "d", 1, 1);
  const uint64_t f = t.Remember(d, "f", 1, 2);
  const uint64_t g = t.Remember(kRoot, "g", 1, 3);
  uint64_t gen = 0;
  ASSERT_TRUE(t.Path(f, &gen).has_value());
  t.Renamed(kRoot, "d", kRoot, "e");
  EXPECT_NE(t.generation(), gen);
  EXPECT_THAT(t.Path(f), Optional(std::string("e/f")));
  t.Exchanged(d, "f", kRoot, "g");
  EXPECT_THAT(t.Path(f), Optional(std::string("g")));
  EXPECT_THAT(t.Path(g), Optional(std::string("e/f")));
  // A rename over an existing name drops that name's link.
  t.Renamed(kRoot, "g", d, "f");
  EXPECT_THAT(t.Find(d, "f"), Optional(f));
  EXPECT_EQ(t.Find(kRoot, "g"), std::nullopt);
}

TEST(InodeTableTest, AnUnlinkedOpenFileKeepsItsHiddenNameUntilTheLastRelease) {
  InodeTable t;
  const uint64_t f = t.Remember(kRoot, "f", 1, 5);
  t.Opened(f);
  t.Opened(f);
  EXPECT_EQ(t.open_count(f), 2);
  EXPECT_EQ(t.Hide(f, kRoot, "f", kRoot, ".sroute/unlinked/5"), std::nullopt);
  EXPECT_TRUE(t.hidden(f));
  EXPECT_EQ(t.Find(kRoot, "f"), std::nullopt);
  EXPECT_THAT(t.Path(f), Optional(std::string(".sroute/unlinked/5")));
  EXPECT_EQ(t.Released(f), std::nullopt) << "one handle left";
  EXPECT_THAT(t.Released(f), Optional(std::string(".sroute/unlinked/5")));
}

// A file routed away from the home hides in its own folder: the last
// release names the hidden link's whole path.
TEST(InodeTableTest, AFileHiddenInItsOwnFolderIsReleasedByItsWholePath) {
  InodeTable t;
  const uint64_t d = t.Remember(kRoot, "rep", 1, 2);
  const uint64_t f = t.Remember(d, "f", 1, 5);
  t.Opened(f);
  EXPECT_EQ(t.Hide(f, d, "f", d, ".sroute-unlinked-5"), std::nullopt);
  EXPECT_EQ(t.Find(d, "f"), std::nullopt);
  EXPECT_THAT(t.Path(f), Optional(std::string("rep/.sroute-unlinked-5")));
  EXPECT_THAT(t.Released(f), Optional(std::string("rep/.sroute-unlinked-5")));
  EXPECT_EQ(t.Find(d, ".sroute-unlinked-5"), std::nullopt);
}

// The last handle closed while the rename that hides the file ran (the
// release found nothing hidden): Hide names the path to remove at once.
TEST(InodeTableTest, AFileClosedWhileItWasBeingHiddenIsRemovedAtOnce) {
  InodeTable t;
  const uint64_t d = t.Remember(kRoot, "rep", 1, 2);
  const uint64_t f = t.Remember(d, "f", 1, 5);
  t.Opened(f);
  EXPECT_EQ(t.Released(f), std::nullopt);  // not hidden yet
  EXPECT_THAT(t.Hide(f, d, "f", d, ".sroute-unlinked-5"),
              Optional(std::string("rep/.sroute-unlinked-5")));
  EXPECT_FALSE(t.hidden(f));
  EXPECT_EQ(t.Find(d, "f"), std::nullopt);
  EXPECT_EQ(t.Find(d, ".sroute-unlinked-5"), std::nullopt);
}

// A folder holding only a file hidden in it moves the hidden name up
// before its rmdir; a release that came between the rename and the record
// leaves the new name to its mover.
TEST(InodeTableTest, AHiddenNameMovesUpToItsFoldersParent) {
  InodeTable t;
  const uint64_t r = t.Remember(kRoot, "rep", 1, 2);
  const uint64_t d = t.Remember(r, "d", 1, 3);
  const uint64_t f = t.Remember(d, "f", 1, 5);
  const uint64_t g = t.Remember(d, "g", 1, 6);
  t.Opened(f);
  t.Opened(g);
  ASSERT_EQ(t.Hide(f, d, "f", d, ".sroute-unlinked-5"), std::nullopt);
  ASSERT_EQ(t.Hide(g, d, "g", d, ".sroute-unlinked-6"), std::nullopt);
  auto hidden = t.HiddenIn(d);
  std::sort(hidden.begin(), hidden.end());
  EXPECT_EQ(hidden, (std::vector<std::pair<uint64_t, std::string>>{
                        {f, ".sroute-unlinked-5"}, {g, ".sroute-unlinked-6"}}));
  EXPECT_TRUE(t.HiddenIn(r).empty());
  EXPECT_TRUE(
      t.MovedHidden(f, d, r, ".sroute-unlinked-5", "rep/.sroute-unlinked-5"));
  EXPECT_THAT(t.Path(f), Optional(std::string("rep/.sroute-unlinked-5")));
  EXPECT_EQ(t.HiddenIn(d).size(), 1u);
  EXPECT_THAT(t.Released(f), Optional(std::string("rep/.sroute-unlinked-5")));
  // g's release removed its old name while the rename ran.
  EXPECT_THAT(t.Released(g), Optional(std::string("rep/d/.sroute-unlinked-6")));
  EXPECT_FALSE(
      t.MovedHidden(g, d, r, ".sroute-unlinked-6", "rep/.sroute-unlinked-6"));
  EXPECT_TRUE(t.HiddenIn(d).empty());
}

// A folder's rmdir waits while a hidden name in it is being removed (its
// endpoint still lists it); the last removal runs what waited.
TEST(InodeTableTest, WhatWaitsForAFoldersHiddenRemovalsRunsAfterTheLast) {
  InodeTable t;
  const uint64_t d = t.Remember(kRoot, "d", 1, 3);
  const uint64_t f = t.Remember(d, "f", 1, 5);
  const uint64_t g = t.Remember(d, "g", 1, 6);
  t.Opened(f);
  t.Opened(g);
  ASSERT_EQ(t.Hide(f, d, "f", d, ".sroute-unlinked-5"), std::nullopt);
  ASSERT_EQ(t.Hide(g, d, "g", d, ".sroute-unlinked-6"), std::nullopt);
  int ran = 0;
  t.AfterHiddenRemovals("d", [&] { ++ran; });
  EXPECT_EQ(ran, 1) << "nothing being removed";
  ASSERT_THAT(t.Released(f), Optional(std::string("d/.sroute-unlinked-5")));
  ASSERT_THAT(t.Released(g), Optional(std::string("d/.sroute-unlinked-6")));
  t.AfterHiddenRemovals("d", [&] { ++ran; });
  t.AfterHiddenRemovals("other", [&] { ran += 10; });
  EXPECT_EQ(ran, 11);
  EXPECT_TRUE(t.HiddenNameRemoved("d/.sroute-unlinked-5").empty());
  auto waiting = t.HiddenNameRemoved("d/.sroute-unlinked-6");
  ASSERT_EQ(waiting.size(), 1u);
  std::move(waiting[0])();
  EXPECT_EQ(ran, 12);
  t.AfterHiddenRemovals("d", [&] { ++ran; });
  EXPECT_EQ(ran, 13);
}

TEST(InodeTableTest, NoCapabilityAnswersOnlyForItsTagAndTime) {
  InodeTable t;
  const uint64_t f = t.Remember(kRoot, "f", 1, 5);
  t.SetNoCapability(f, 3, 1000);
  EXPECT_TRUE(t.NoCapability(f, 3, 999));
  EXPECT_FALSE(t.NoCapability(f, 3, 1000)) << "expired";
  EXPECT_FALSE(t.NoCapability(f, 4, 10)) << "xattrs changed since";
}

TEST(InodeTableTest, ConcurrentLookupsAndForgetsKeepCountsExact) {
  InodeTable t;
  const uint64_t d = t.Remember(kRoot, "d", 1, 1);
  std::vector<std::thread> threads;
  for (int th = 0; th < 4; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < 2000; ++i) {
        const std::string name = "f" + std::to_string(i % 50);
        const uint64_t ino = t.Remember(d, name, 1, 1000 + i % 50);
        t.Forget(ino, 1);
      }
      (void)th;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(t.Inodes(), UnorderedElementsAre(kRoot, d));
}

}  // namespace
}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// FUSE requests counted by opcode (the daemon's /metrics).
#include <linux/fuse.h>

#include <thread>
#include <vector>

#include "fuse/session_loop.h"
#include "gtest/gtest.h"

namespace sroute {
namespace {

TEST(FuseRequestCountsTest, OpcodesHaveTheKernelsNames) {
  EXPECT_EQ(FuseOpSlotName(FuseOpSlot(FUSE_LOOKUP)), "lookup");
  EXPECT_EQ(FuseOpSlotName(FuseOpSlot(FUSE_READ)), "read");
  EXPECT_EQ(FuseOpSlotName(FuseOpSlot(FUSE_WRITE)), "write");
  EXPECT_EQ(FuseOpSlotName(FuseOpSlot(FUSE_CREATE)), "create");
  EXPECT_EQ(FuseOpSlotName(FuseOpSlot(FUSE_BATCH_FORGET)), "batch_forget");
  EXPECT_EQ(FuseOpSlotName(FuseOpSlot(FUSE_COPY_FILE_RANGE)),
            "copy_file_range");
  EXPECT_EQ(FuseOpSlotName(FuseOpSlot(FUSE_TMPFILE)), "tmpfile");
  EXPECT_EQ(FuseOpSlotName(FuseOpSlot(CUSE_INIT)), "other");
  EXPECT_EQ(FuseOpSlotName(7), "");  // no opcode 7
}

TEST(FuseRequestCountsTest, CountsFromManyThreadsAddUp) {
  FuseRequestCounts counts;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&counts] {
      for (int i = 0; i < 10000; ++i) counts.Add(FuseOpSlot(FUSE_READ));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counts.Read(FuseOpSlot(FUSE_READ)), 80000u);
  EXPECT_EQ(counts.Read(FuseOpSlot(FUSE_WRITE)), 0u);
}

}  // namespace
}  // namespace sroute

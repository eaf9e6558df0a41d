// SPDX-License-Identifier: Apache-2.0
// The flash timing model (endpoints/flash_model.h): presets and checks,
// the times of unloaded IOs, free-block accounting and GC on scripted
// sequences, latency ordering around a collecting die, the write buffer,
// wear, and idle prediction.
#include "endpoints/flash_model.h"

#include <memory>
#include <random>

#include "gtest/gtest.h"

namespace sroute {
namespace {

constexpr uint64_t kMs = 1'000'000;

FlashOptions Small(GcMode mode) {
  auto o = FlashModel::Preset("small");
  EXPECT_TRUE(o.ok()) << o.status();
  o->mode = mode;
  return *o;
}

TEST(FlashModelTest, PresetsAndOptionsAreChecked) {
  for (const char* name : {"rackblox", "small", "worn", "healthy", "fast"}) {
    auto o = FlashModel::Preset(name);
    ASSERT_TRUE(o.ok()) << name;
    EXPECT_TRUE(FlashModel::Check(*o).ok()) << name;
  }
  auto none = FlashModel::Preset("tlc9000");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no preset named 'tlc9000'"),
            std::string::npos);
  FlashOptions o = Small(GcMode::kAuto);
  o.gc_threshold = 0.5;  // above soft_threshold
  absl::Status s = FlashModel::Check(o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gc_threshold (0.5)"), std::string::npos) << s;
  o = Small(GcMode::kAuto);
  o.geometry.spare = 0.05;  // less than 2 of a die's 16 blocks
  EXPECT_FALSE(FlashModel::Check(o).ok());
  o = Small(GcMode::kAuto);
  o.geometry.page_bytes = 3000;
  EXPECT_FALSE(FlashModel::Check(o).ok());
}

// sroute-sim warms one model per preset and copies it to every device: a
// copy stands alone (its geometry its own) and goes on as the original
// would, after the original is gone.
TEST(FlashModelTest, ACopyGoesOnAsTheOriginalWould) {
  auto original = std::make_unique<FlashModel>(*FlashModel::Preset("small"));
  uint64_t t = 0;
  for (uint64_t lpn = 0; lpn < original->logical_pages(); ++lpn) {
    t = std::max(t, original->Write(lpn, t).done_ns);
  }
  FlashModel twin(*original);
  std::vector<FlashModel> copies(3, *original);  // copied again as it grows
  copies.push_back(*original);
  std::vector<uint64_t> expected;
  for (uint64_t i = 0; i < 200; ++i) {
    const uint64_t lpn = (i * 7) % original->logical_pages();
    expected.push_back(i % 3 == 0 ? original->Write(lpn, t + i * 1000).done_ns
                                  : original->Read(lpn, t + i * 1000).done_ns);
  }
  original.reset();
  for (FlashModel* m : {&twin, &copies[0], &copies[3]}) {
    for (uint64_t i = 0; i < 200; ++i) {
      const uint64_t lpn = (i * 7) % m->logical_pages();
      const uint64_t done = i % 3 == 0 ? m->Write(lpn, t + i * 1000).done_ns
                                       : m->Read(lpn, t + i * 1000).done_ns;
      ASSERT_EQ(done, expected[i]) << "IO " << i;
    }
    EXPECT_TRUE(m->Verify().ok()) << m->Verify();
  }
}

TEST(FlashModelTest, UnloadedIosTakeThePresetTimes) {
  auto o = FlashModel::Preset("rackblox");
  ASSERT_TRUE(o.ok());
  FlashModel m(*o);
  const FlashTiming& t = o->timing;
  EXPECT_EQ(t.program_ns, 10 * t.read_ns);
  // A page never written reads as zeros from the controller.
  EXPECT_EQ(m.Read(7, 0).done_ns, t.buffer_ns);
  // A write is acknowledged from the buffer; read back from DRAM until it
  // is programmed, from its die after.
  const uint64_t at = 100 * kMs;
  EXPECT_EQ(m.Write(7, at).done_ns, at + t.buffer_ns);
  EXPECT_EQ(m.Read(7, at + 1).done_ns, at + 1 + t.buffer_ns);
  const uint64_t later = at + 10 * kMs;
  const auto r = m.Read(7, later);
  EXPECT_EQ(r.done_ns, later + t.read_ns);
  EXPECT_FALSE(r.delayed);
  // Reads of one die queue; a read does not wait for a program there.
  EXPECT_EQ(m.Read(7, later).done_ns, later + 2 * t.read_ns);
  m.Trim(7, later);
  EXPECT_EQ(m.Read(7, later + kMs).done_ns, later + kMs + t.buffer_ns);
  EXPECT_EQ(m.DieOf(7), -1);
}

TEST(FlashModelTest, AReadWaitsForAProgramToSuspend) {
  auto o = FlashModel::Preset("healthy");
  ASSERT_TRUE(o.ok());
  o->geometry.channels = 1;
  o->geometry.dies_per_channel = 1;  // every page on one die
  FlashModel m(*o);
  const FlashTiming& t = o->timing;
  ASSERT_GT(t.suspend_ns, 0u);
  m.Write(1, 0);
  m.ForgetTime();
  // Page 1 is on the die; a write starts a program there at `at`.
  const uint64_t at = 10 * kMs;
  m.Write(2, at);
  // A read while it programs waits for the suspension, not for the end.
  const uint64_t read_at = at + t.buffer_ns + 1000;
  EXPECT_EQ(m.Read(1, read_at).done_ns, read_at + t.suspend_ns + t.read_ns);
  // The program resumes between reads: a second read behind the first
  // suspends it again.
  EXPECT_EQ(m.Read(1, read_at).done_ns,
            read_at + 2 * (t.suspend_ns + t.read_ns));
  // Without suspension costs (rackblox) the read does not wait.
  FlashOptions r = *FlashModel::Preset("rackblox");
  r.geometry = o->geometry;
  FlashModel plain(r);
  plain.Write(1, 0);
  plain.ForgetTime();
  plain.Write(2, at);
  EXPECT_EQ(plain.Read(1, read_at).done_ns, read_at + r.timing.read_ns);
}

TEST(FlashModelTest, CoordinatedGcWaitsToBeToldAndReclaims) {
  FlashModel m(Small(GcMode::kCoordinated));
  const FlashGeometry& g = m.options().geometry;
  const uint64_t data = m.logical_pages() / 2;  // a quarter of the pages
  uint64_t now = kMs;
  auto write_all = [&] {
    for (uint64_t lpn = 0; lpn < data; ++lpn) {
      m.Write(lpn, now);
      now += kMs;  // the buffer drains between writes
    }
  };
  write_all();
  EXPECT_EQ(m.Need(), GcNeed::kNone);
  const double after_one = m.FreeRatio();
  // data pages fill data / pages_per_block blocks, and one is open per die.
  EXPECT_NEAR(after_one,
              1.0 - static_cast<double>(data / g.pages_per_block) /
                        (g.dies() * g.blocks_per_die),
              1.0 / g.blocks_per_die);
  std::vector<GcNeed> seen;
  for (uint64_t lpn = 0; m.Need() != GcNeed::kRegular; lpn = (lpn + 1) % data) {
    m.Write(lpn, now);  // every overwrite leaves an invalid page behind
    now += kMs;
    seen.push_back(m.Need());
  }
  EXPECT_NE(std::find(seen.begin(), seen.end(), GcNeed::kSoft), seen.end());
  FlashState s = m.State(now);
  EXPECT_EQ(s.gc_passes, 0u) << "not told to collect yet";
  EXPECT_EQ(s.erases, 0u);
  ASSERT_TRUE(m.Verify().ok()) << m.Verify();
  const uint64_t end = m.StartGc(now);
  EXPECT_GT(end, now);
  EXPECT_TRUE(m.InGc(now));
  EXPECT_FALSE(m.InGc(end));
  EXPECT_GE(m.FreeRatio(), m.options().gc_target);
  s = m.State(now);
  EXPECT_TRUE(s.gc_active);
  EXPECT_EQ(s.gc_until_ns, end);
  EXPECT_GT(s.erases, 0u);
  EXPECT_GE(s.erase_max, 1u);
  EXPECT_GT(s.erase_mean, 0.0);
  EXPECT_EQ(s.forced_gc, 0u);
  // A coordinator's poll: the same state, no wear (it looks at every block).
  const FlashState quick = m.State(now, /*wear=*/false);
  EXPECT_EQ(quick.gc_until_ns, s.gc_until_ns);
  EXPECT_EQ(quick.free_ratio, s.free_ratio);
  EXPECT_EQ(quick.erases, s.erases);
  EXPECT_EQ(quick.erase_max, 0u);
  EXPECT_TRUE(m.Verify().ok()) << m.Verify();
  for (uint64_t lpn = 0; lpn < data; ++lpn) EXPECT_GE(m.DieOf(lpn), 0) << lpn;
}

// A background pass holds what the predicted idle time holds: its dies take
// no victim after it, so it ends within one victim of that time and gains
// less than a pass to gc_target, which a later pass completes.
TEST(FlashModelTest, ABackgroundPassEndsWithTheIdleTime) {
  auto fill = [](FlashModel& m, uint64_t* now) {
    const uint64_t data = m.logical_pages() / 2;
    for (uint64_t lpn = 0; lpn < data; ++lpn, *now += kMs) m.Write(lpn, *now);
    for (uint64_t lpn = 0; m.Need() != GcNeed::kRegular;
         lpn = (lpn + 1) % data, *now += kMs) {
      m.Write(lpn, *now);
    }
  };
  FlashModel bounded(Small(GcMode::kCoordinated));
  FlashModel whole(Small(GcMode::kCoordinated));
  uint64_t now_b = kMs, now_w = kMs;
  fill(bounded, &now_b);
  fill(whole, &now_w);
  ASSERT_EQ(now_b, now_w);
  const FlashTiming& t = bounded.options().timing;
  const uint64_t victim_max =
      bounded.options().geometry.pages_per_block * (t.read_ns + t.program_ns) +
      t.erase_ns;
  const uint64_t idle = 2 * t.erase_ns;
  const uint64_t end_whole = whole.StartGc(now_w);
  const uint64_t end_bounded = bounded.StartGc(now_b, now_b + idle);
  EXPECT_GT(end_bounded, now_b) << "it takes a victim";
  EXPECT_LE(end_bounded, now_b + idle + victim_max);
  EXPECT_LT(end_bounded, end_whole);
  EXPECT_LT(bounded.FreeRatio(), whole.FreeRatio());
  EXPECT_LT(bounded.FreeRatio(), bounded.options().gc_target);
  // Nothing after the idle time: a pass that begins past it takes nothing.
  const FlashState before = bounded.State(end_bounded);
  EXPECT_EQ(bounded.StartGc(end_bounded, end_bounded), end_bounded);
  EXPECT_EQ(bounded.State(end_bounded).erases, before.erases);
  // A regular pass later reaches gc_target.
  bounded.StartGc(end_bounded);
  EXPECT_GE(bounded.FreeRatio(), bounded.options().gc_target);
  EXPECT_TRUE(bounded.Verify().ok()) << bounded.Verify();
}

TEST(FlashModelTest, AutoGcKeepsFreeBlocksAboveItsThreshold) {
  FlashModel m(Small(GcMode::kAuto));
  const FlashGeometry& g = m.options().geometry;
  std::mt19937_64 rng(7);
  const uint64_t data = m.logical_pages() * 3 / 4;
  uint64_t now = kMs;
  double lowest = 1.0;
  for (int i = 0; i < 20000; ++i) {
    m.Write(rng() % data, now);
    now += kMs;
    lowest = std::min(lowest, m.FreeRatio());
  }
  const FlashState s = m.State(now);
  EXPECT_GT(s.gc_passes, 0u);
  EXPECT_GT(s.pages_copied, 0u) << "random overwrites leave victims mixed";
  EXPECT_EQ(s.forced_gc, 0u);
  // A die collects once it is below the threshold: at most a block under.
  EXPECT_GE(lowest, m.options().gc_threshold - 1.0 / g.blocks_per_die);
  EXPECT_TRUE(m.Verify().ok()) << m.Verify();
}

// kSelf: the device collects all its dies in one pass of its own when it
// needs regular GC, so a coordinator polling it sees one pass (every die's
// GC ends together) rather than dies in turn.
TEST(FlashModelTest, SelfGcCollectsTheWholeDeviceAtOnce) {
  FlashModel m(Small(GcMode::kSelf));
  const FlashGeometry& g = m.options().geometry;
  std::mt19937_64 rng(7);
  const uint64_t data = m.logical_pages() * 3 / 4;
  uint64_t now = kMs;
  double lowest = 1.0;
  int passes_seen = 0;
  for (int i = 0; i < 20000; ++i) {
    const bool before = m.InGc(now);
    m.Write(rng() % data, now);
    if (!before && m.InGc(now)) {
      ++passes_seen;
      // Every die got to gc_target (at most a block short: a die with no
      // victim that gains) in this one pass.
      EXPECT_GE(m.FreeRatio(), m.options().gc_target - 1.0 / g.blocks_per_die);
    }
    now += kMs;
    lowest = std::min(lowest, m.FreeRatio());
  }
  const FlashState s = m.State(now);
  EXPECT_GT(passes_seen, 0);
  EXPECT_EQ(s.forced_gc, 0u);
  EXPECT_GE(lowest, m.options().gc_threshold - 1.0 / g.blocks_per_die);
  EXPECT_TRUE(m.Verify().ok()) << m.Verify();
}

TEST(FlashModelTest, AFullDieCollectsEvenUncoordinated) {
  FlashModel m(Small(GcMode::kCoordinated));
  std::mt19937_64 rng(9);
  uint64_t now = kMs;
  for (int i = 0; i < 20000; ++i) {
    m.Write(rng() % m.logical_pages(), now);
    now += kMs;
  }
  const FlashState s = m.State(now);
  EXPECT_GT(s.forced_gc, 0u) << "never told, and out of blocks";
  EXPECT_TRUE(m.Verify().ok()) << m.Verify();
}

// A read behind GC on its die waits: for the GC step under way (a page
// copied, a block erased: an erase at most), or with gc_yields false for
// the whole pass; a read on another die does not wait.
class GcHoldTest : public ::testing::TestWithParam<bool> {};

TEST_P(GcHoldTest, AReadWaitsForGcOnItsDieOnly) {
  FlashOptions o = Small(GcMode::kCoordinated);
  o.gc_yields = GetParam();
  FlashModel m(o);
  const FlashTiming& t = m.options().timing;
  const uint64_t data = m.logical_pages() / 2;
  uint64_t now = kMs;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t lpn = 0; lpn < data; ++lpn) {
      m.Write(lpn, now);
      now += kMs;
    }
  }
  uint64_t on0 = UINT64_MAX, on1 = UINT64_MAX;
  for (uint64_t lpn = 0; lpn < data; ++lpn) {
    if (m.DieOf(lpn) == 0 && on0 == UINT64_MAX) on0 = lpn;
    if (m.DieOf(lpn) == 1 && on1 == UINT64_MAX) on1 = lpn;
  }
  ASSERT_NE(on0, UINT64_MAX);
  ASSERT_NE(on1, UINT64_MAX);
  now += 10 * kMs;  // every program done
  const uint64_t end = m.CollectDie(0, now);
  ASSERT_GE(end, now + t.erase_ns);
  const auto behind = m.Read(on0, now + 1);
  EXPECT_TRUE(behind.delayed);
  if (GetParam()) {
    EXPECT_GT(behind.done_ns, now + 1 + t.read_ns);
    EXPECT_LE(behind.done_ns, now + 1 + t.erase_ns + t.read_ns);
    EXPECT_LT(behind.done_ns, end + t.read_ns) << "the pass has steps";
  } else {
    EXPECT_EQ(behind.done_ns, end + t.read_ns);
  }
  const auto beside = m.Read(on1, now + 1);
  EXPECT_FALSE(beside.delayed);
  EXPECT_EQ(beside.done_ns, now + 1 + t.read_ns);
  EXPECT_EQ(m.State(now).reads_behind_gc, 1u);
}

INSTANTIATE_TEST_SUITE_P(Yields, GcHoldTest, ::testing::Bool());

// A GC spell holds every die for its length, free blocks or not: reads
// behind it wait for the erase under way, and none after it ends.
TEST(FlashModelTest, AGcSpellSlowsReadsForItsLengthOnly) {
  FlashOptions o = Small(GcMode::kCoordinated);
  FlashModel m(o);
  const FlashTiming& t = m.options().timing;
  uint64_t now = kMs;
  for (uint64_t lpn = 0; lpn < 64; ++lpn) m.Write(lpn, now);
  now += 100 * kMs;  // every program done
  const uint64_t end = m.HoldForGc(now, now + 50 * kMs);
  EXPECT_GE(end, now + 50 * kMs);
  EXPECT_LE(end, now + 50 * kMs + t.erase_ns);
  EXPECT_TRUE(m.InGc(now + 25 * kMs));
  EXPECT_FALSE(m.InGc(end));
  uint64_t slower = 0;
  for (uint64_t lpn = 0; lpn < 64; ++lpn) {
    const auto r = m.Read(lpn, now + 10 * kMs + lpn * kMs / 2);
    EXPECT_TRUE(r.delayed) << lpn;
    EXPECT_LE(r.done_ns,
              now + 10 * kMs + lpn * kMs / 2 + t.erase_ns + 64 * t.read_ns);
    slower += r.done_ns > now + 10 * kMs + lpn * kMs / 2 + t.read_ns;
  }
  EXPECT_GT(slower, 32u);
  const auto after = m.Read(0, end + kMs);
  EXPECT_FALSE(after.delayed);
  EXPECT_EQ(after.done_ns, end + kMs + t.read_ns);
}

TEST(FlashModelTest, AFullBufferMakesWritesWait) {
  FlashModel m(Small(GcMode::kAuto));
  const FlashTiming& t = m.options().timing;
  const uint64_t now = kMs;
  for (uint32_t i = 0; i < t.buffer_pages; ++i) {
    const auto w = m.Write(i, now);
    EXPECT_EQ(w.done_ns, now + t.buffer_ns) << i;
  }
  const auto waited = m.Write(t.buffer_pages, now);
  EXPECT_TRUE(waited.delayed) << "waited for the buffer";
  // The first page's program ends first: its slot is the one taken.
  EXPECT_EQ(waited.done_ns, now + t.program_ns + t.buffer_ns);
  EXPECT_EQ(m.State(now).writes_waited, 1u);
}

TEST(FlashModelTest, IdleGapsArePredictedByAnEwma) {
  FlashModel m(Small(GcMode::kAuto));
  m.Read(0, 1 * kMs);
  m.Read(0, 11 * kMs);  // gap 10 ms: 0.5 * 10
  EXPECT_EQ(m.State(11 * kMs).predicted_idle_ns, 5 * kMs);
  m.Read(0, 71 * kMs);  // gap 60 ms: 0.5 * 60 + 0.5 * 5
  EXPECT_EQ(m.State(71 * kMs).predicted_idle_ns, 32'500'000u);
  EXPECT_GT(m.State(71 * kMs).predicted_idle_ns, m.options().bg_idle_ns);
  m.Read(0, 71 * kMs + 100'000);  // 0.1 ms: the load's rhythm, not idle
  EXPECT_EQ(m.State(72 * kMs).predicted_idle_ns, 32'500'000u);
  // Background GC once idle for idle_min_ns, and only with blocks to gain.
  EXPECT_FALSE(m.State(71 * kMs + 500'000).bg_ok) << "not idle yet";
  EXPECT_FALSE(m.State(73 * kMs).bg_ok) << "nothing to collect";
}

// A device written and over-written at time 0, then made to forget time:
// its pages and blocks stay as written (so GC has work), it is idle and
// its counters start from zero.
TEST(FlashModelTest, AWarmedDeviceForgetsTimeNotPages) {
  FlashModel m(Small(GcMode::kAuto));
  std::mt19937_64 rng(5);
  const uint64_t pages = m.logical_pages() * 8 / 10;
  for (uint64_t lpn = 0; lpn < pages; ++lpn) m.Write(lpn, 0);
  for (uint64_t i = 0; i < 2 * pages; ++i) m.Write(rng() % pages, 0);
  const double free = m.FreeRatio();
  m.ForgetTime();
  EXPECT_TRUE(m.Verify().ok()) << m.Verify();
  EXPECT_EQ(m.FreeRatio(), free);
  const FlashState s = m.State(kMs);
  EXPECT_FALSE(s.gc_active);
  EXPECT_EQ(s.writes, 0u);
  EXPECT_GT(s.erase_max, 0u) << "wear stays";
  EXPECT_LT(m.Read(3, kMs).done_ns, kMs + 2 * m.options().timing.read_ns);
}

}  // namespace
}  // namespace sroute

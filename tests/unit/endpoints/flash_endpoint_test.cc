// SPDX-License-Identifier: Apache-2.0
// The emulated flash endpoint (endpoints/flash_endpoint.h): bytes read
// back exactly across GC, a full device refuses new pages with ENOSPC and
// takes them back on unlink, names carry their pages, and no IO completes
// before its modelled time.
#include "endpoints/flash_endpoint.h"

#include <fcntl.h>

#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"
#include "util/clock.h"
#include "util/errno_status.h"

namespace sroute {
namespace {

using ::sroute::testing::TempDir;

class FlashEndpointTest : public ::testing::Test {
 protected:
  void Open(double dilation = 1.0, GcMode mode = GcMode::kAuto) {
    FlashEndpoint::Options o;
    auto model = FlashModel::Preset("small");
    ASSERT_TRUE(model.ok());
    o.model = *model;
    o.model.mode = mode;
    o.dilation = dilation;
    auto ssd = FlashEndpoint::Open(dir_.path(), o);
    ASSERT_TRUE(ssd.ok()) << ssd.status();
    ssd_ = *ssd;
  }
  absl::Status Run(Io& io, const std::string& path) {
    std::atomic<bool> done{false};
    io.set_completion([&done](Io&) {
      done.store(true);
      done.notify_one();
    });
    ssd_->Submit(&io, path);
    done.wait(false);
    return io.status;
  }
  absl::Status Make(const std::string& path) {
    Io io;
    io.header.op = Op::kCreate;
    io.args.mode = 0644;
    io.args.open_flags = O_CREAT | O_WRONLY;
    return Run(io, path);
  }
  absl::Status Write(const std::string& path, uint64_t at,
                     const std::string& data) {
    Io io;
    io.header.op = Op::kWrite;
    io.header.offset = at;
    io.header.length = data.size();
    io.write_data = std::span<const char>(data.data(), data.size());
    return Run(io, path);
  }
  absl::StatusOr<std::string> Read(const std::string& path, uint64_t at,
                                   size_t n) {
    std::string buf(n, '\0');
    Io io;
    io.header.op = Op::kRead;
    io.header.offset = at;
    io.header.length = n;
    io.read_buffer = std::span<char>(buf.data(), buf.size());
    if (absl::Status s = Run(io, path); !s.ok()) return s;
    buf.resize(io.bytes);
    return buf;
  }
  absl::Status Simple(Op op, const std::string& path,
                      const std::string& second = "") {
    Io io;
    io.header.op = op;
    io.args.second_file = second;
    return Run(io, path);
  }

  TempDir dir_;
  std::shared_ptr<FlashEndpoint> ssd_;
};

TEST_F(FlashEndpointTest, BytesReadBackExactlyAcrossGc) {
  Open();
  constexpr uint64_t kPages = 256;  // half the device's logical pages
  ASSERT_TRUE(Make("f").ok());
  std::string model(kPages * 4096, '\0');
  std::mt19937_64 rng(3);
  for (int i = 0; i < 3000; ++i) {
    const uint64_t page = rng() % kPages;
    std::string block(4096, static_cast<char>('a' + i % 26));
    block[0] = static_cast<char>(i);
    ASSERT_TRUE(Write("f", page * 4096, block).ok()) << i;
    model.replace(page * 4096, 4096, block);
  }
  const FlashState s = ssd_->State();
  EXPECT_GT(s.gc_passes, 0u);
  EXPECT_GT(s.erases, 0u);
  auto all = Read("f", 0, model.size());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(*all == model);
  EXPECT_EQ(ssd_->used_pages(), kPages);
}

TEST_F(FlashEndpointTest, AFullDeviceRefusesNewPagesAndTakesThemBack) {
  Open();
  const uint64_t pages = FlashModel::Preset("small")->geometry.logical_pages();
  ASSERT_TRUE(Make("a").ok());
  ASSERT_TRUE(Write("a", 0, std::string(pages * 4096, 'a')).ok());
  EXPECT_EQ(ssd_->used_pages(), pages);
  ASSERT_TRUE(Write("a", 4096, std::string(4096, 'b')).ok())
      << "an overwrite needs no new page";
  ASSERT_TRUE(Make("b").ok());
  absl::Status full = Write("b", 0, "x");
  EXPECT_EQ(ErrnoOf(full), ENOSPC) << full;
  auto b = Read("b", 0, 10);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, "") << "nothing was written";
  ASSERT_TRUE(Simple(Op::kUnlink, "a").ok());
  EXPECT_EQ(ssd_->used_pages(), 0u);
  EXPECT_TRUE(Write("b", 0, "x").ok());
  EXPECT_EQ(ssd_->State().trims, pages);
}

TEST_F(FlashEndpointTest, NamesCarryTheirPages) {
  Open();
  ASSERT_TRUE(Make("a").ok());
  ASSERT_TRUE(Write("a", 0, std::string(3 * 4096, 'a')).ok());
  ASSERT_TRUE(Make("b").ok());
  ASSERT_TRUE(Write("b", 0, std::string(4096, 'b')).ok());
  ASSERT_TRUE(Simple(Op::kRenameFrom, "a", "b").ok());  // b's page goes
  EXPECT_EQ(ssd_->used_pages(), 3u);
  Io cut;
  cut.header.op = Op::kTruncate;
  cut.args.size = 4097;  // two pages stay
  ASSERT_TRUE(Run(cut, "b").ok());
  EXPECT_EQ(ssd_->used_pages(), 2u);
  auto b = Read("b", 0, 8192);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 4097u);
  ASSERT_TRUE(Simple(Op::kUnlink, "b").ok());
  EXPECT_EQ(ssd_->used_pages(), 0u);
}

TEST_F(FlashEndpointTest, NoIoCompletesBeforeItsModelledTime) {
  Open(/*dilation=*/10);
  const FlashTiming t = FlashModel::Preset("small")->timing;
  ASSERT_TRUE(Make("f").ok());
  uint64_t start = MonotonicNanos();
  ASSERT_TRUE(Write("f", 0, std::string(4096, 'w')).ok());
  EXPECT_GE(MonotonicNanos() - start, 10 * t.buffer_ns);
  // Once programmed (the write's program ends a program's time after it,
  // whenever that was: a slow build takes long to get here), a read goes
  // to its die.
  const uint64_t written = ssd_->ModelNow();
  while (ssd_->ModelNow() < written + 2 * t.program_ns) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  start = MonotonicNanos();
  auto r = Read("f", 0, 4096);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, std::string(4096, 'w'));
  EXPECT_GE(MonotonicNanos() - start, 10 * t.read_ns);
}

// The sSwitch's own IOs read the device's state and grant GC through its
// xattrs; a user's are refused, and the device's gauges say what it did.
TEST_F(FlashEndpointTest, ItsControlIsTheSwitchsOnly) {
  Open(1.0, GcMode::kCoordinated);
  ASSERT_TRUE(Make("f").ok());
  // Over-writes: about 11 of each die's 16 blocks fill, mostly garbage.
  for (int i = 0; i < 700; ++i) {
    ASSERT_TRUE(Write("f", (i % 100) * 4096, std::string(4096, 'x')).ok());
  }
  Io state;
  state.header.op = Op::kGetxattr;
  state.args.xattr_name = kFlashStateXattr;
  ASSERT_TRUE(Run(state, "").ok()) << state.status;
  EXPECT_NE(state.data.find("free_permille="), std::string::npos) << state.data;
  EXPECT_NE(state.data.find("mode=coordinated"), std::string::npos);
  EXPECT_NE(state.data.find(" gc=0"), std::string::npos) << state.data;
  const uint64_t passes = ssd_->State().gc_passes;

  Io user;
  user.header.op = Op::kSetxattr;
  user.args.xattr_name = kFlashGcXattr;
  user.write_data = std::span<const char>("soft", 4);
  user.args.caller = Credentials::Of(1000, 1000);
  EXPECT_EQ(ErrnoOf(Run(user, "f")), EPERM);
  EXPECT_EQ(ssd_->State().gc_passes, passes);

  Io bad;
  bad.header.op = Op::kSetxattr;
  bad.args.xattr_name = kFlashGcXattr;
  bad.write_data = std::span<const char>("now", 3);
  EXPECT_EQ(ErrnoOf(Run(bad, "")), EINVAL);

  Io grant;
  grant.header.op = Op::kSetxattr;
  grant.args.xattr_name = kFlashGcXattr;
  grant.write_data = std::span<const char>("soft", 4);
  ASSERT_TRUE(Run(grant, "f").ok()) << grant.status;
  EXPECT_GT(ssd_->State().gc_passes, passes);
  std::map<std::string, int64_t> gauges;
  ssd_->Gauges("ssd0", [&](std::string key, int64_t value) {
    gauges[std::move(key)] = value;
  });
  EXPECT_EQ(gauges["flash.ssd0.gc_soft"], 1);
  EXPECT_EQ(gauges["flash.ssd0.gc_passes"],
            static_cast<int64_t>(ssd_->State().gc_passes));
  EXPECT_EQ(gauges["flash.ssd0.used_pages"], 100);
  EXPECT_GT(gauges["flash.ssd0.free_permille"], 0);
  EXPECT_TRUE(gauges.contains("flash.ssd0.erase_variance_milli"));
}

TEST(FlashSpecTest, ParsesTheDirectoryThePresetAndItsNumbers) {
  auto spec = ParseFlashSpec(
      "/srv/ssd0,dilation=10,preset=small,mode=coordinated,read_us=50,"
      "blocks_per_die=32");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->dir, "/srv/ssd0");
  EXPECT_EQ(spec->options.dilation, 10);
  EXPECT_EQ(spec->options.model.mode, GcMode::kCoordinated);
  EXPECT_EQ(spec->options.model.timing.read_ns, 50'000u);
  EXPECT_EQ(spec->options.model.geometry.blocks_per_die, 32u);
  EXPECT_EQ(spec->options.model.geometry.channels, 2u) << "from the preset";
  EXPECT_TRUE(spec->options.model.gc_yields) << "the default";
  auto self = ParseFlashSpec("/srv/ssd0,mode=self");
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_EQ(self->options.model.mode, GcMode::kSelf);
  auto holding = ParseFlashSpec("/srv/ssd0,gc_yields=0");
  ASSERT_TRUE(holding.ok()) << holding.status();
  EXPECT_FALSE(holding->options.model.gc_yields);
  auto plain = ParseFlashSpec("/srv/ssd1");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->options.model.geometry.channels, 8u) << "rackblox";
  for (const auto& [bad, why] :
       std::vector<std::pair<std::string, std::string>>{
           {"", "expected DIR"},
           {"/d,colour=blue", "unknown option 'colour'"},
           {"/d,read_us=fast", "read_us=fast is not a number"},
           {"/d,mode=lazy", "mode 'lazy'"},
           {"/d,preset=tlc", "no preset named 'tlc'"},
           {"/d,gc_threshold=0.5", "gc_threshold (0.5)"},
           {"/d,dilation=0.5", "dilation 0.5"},
           {"/d,spare", "expected key=value"},
           {"/d,vssds=3", "vssds=3 must divide channels=8"},
           {"/d,vssds=0", "vssds=0"}}) {
    auto s = ParseFlashSpec(bad);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find(why), std::string::npos)
        << bad << ": " << s.status();
  }
}

// vssds=N: N devices by channel group, each with its share of the
// channels and of the write buffer, its own directory and name.
TEST(FlashSpecTest, VssdsSplitTheDeviceByChannels) {
  auto spec = ParseFlashSpec("/srv/ssd0,vssds=4");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const auto parts = spec->Parts("ssd0");
  ASSERT_EQ(parts.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(parts[i].name, "ssd0.v" + std::to_string(i));
    EXPECT_EQ(parts[i].dir, "/srv/ssd0/v" + std::to_string(i));
    EXPECT_EQ(parts[i].options.model.geometry.channels, 2u);
    EXPECT_EQ(parts[i].options.model.geometry.dies_per_channel, 4u);
    EXPECT_EQ(parts[i].options.model.timing.buffer_pages, 256u);
  }
  const auto whole = ParseFlashSpec("/srv/ssd1")->Parts("ssd1");
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].name, "ssd1");
  EXPECT_EQ(whole[0].dir, "/srv/ssd1");
}

TEST_F(FlashEndpointTest, OptionsAreChecked) {
  FlashEndpoint::Options o;
  o.dilation = 0.5;
  auto bad = FlashEndpoint::Open(dir_.path(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dilation"), std::string::npos);
  o.dilation = 1;
  auto missing = FlashEndpoint::Open(dir_ / "nope", o);
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace sroute

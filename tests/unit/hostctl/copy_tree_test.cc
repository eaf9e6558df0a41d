// SPDX-License-Identifier: Apache-2.0
// Copies between a host's endpoints (hostctl/copy_tree.h): in budgeted
// steps that resume where the last ended, a sync pass that writes only what
// differs and removes what the source lost, counting, removing, and bad
// names refused. Real directories behind local endpoints.
#include "hostctl/copy_tree.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "embed/embedded_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "tests/util/temp_dir.h"
#include "util/mutex.h"

namespace sroute {
namespace {

namespace fs = std::filesystem;
using ::sroute::testing::TempDir;
using ::testing::HasSubstr;

void Put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

std::string Get(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every name under `root` (but the reserved folders at its top and special
// files) with what it holds: a file's bytes and mode, a link's text, "dir" and
// mode.
std::map<std::string, std::string> Tree(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(root);
       it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = fs::relative(it->path(), root).string();
    if (rel.starts_with(".sroute-wl-")) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st;
    lstat(it->path().c_str(), &st);
    const std::string mode = std::to_string(st.st_mode & 07777);
    if (it->is_symlink()) {
      out[rel] = "link " + fs::read_symlink(it->path()).string();
    } else if (it->is_directory()) {
      out[rel] = "dir " + mode;
    } else if (!it->is_regular_file()) {
      continue;  // a pipe or device node: not data (and never copied)
    } else {
      out[rel] = mode + " " + Get(it->path());
    }
  }
  return out;
}

class CopyTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(host_.AddLocalEndpoint("A", a_.path()).ok());
    ASSERT_TRUE(host_.AddLocalEndpoint("B", b_.path()).ok());
    Put(a_ / "top", "t");
    Put(a_ / "d/big", std::string(300 << 10, 'x'));
    Put(a_ / "d/e/small", "hello");
    Put(a_ / "d/empty", "");
    Put(a_ / "z/last", "z");
    fs::create_symlink("d/e/small", a_ / "ln");
    ASSERT_EQ(mkfifo((a_ / "d/pipe").c_str(), 0644), 0);  // stays behind
    chmod((a_ / "top").c_str(), 0640);
    chmod((a_ / "d/e").c_str(), 0750);
    Put(a_ / ".sroute-wl-7/not-mine", "skipped");
  }

  absl::Status Run(proto::Copy::Mode mode, const std::string& from,
                   const std::string& to, uint32_t max_files, int* calls,
                   proto::CopyProgress* total) {
    proto::Copy req;
    req.set_mode(mode);
    req.set_from(from);
    req.set_to(to);
    req.set_max_files(max_files);
    *calls = 0;
    total->Clear();
    for (;;) {
      proto::CopyProgress p;
      absl::Status s = CopyTree(host_.sswitch(), req, &p);
      ++*calls;
      if (!s.ok()) return s;
      total->set_files(total->files() + p.files());
      total->set_bytes(total->bytes() + p.bytes());
      total->set_bytes_written(total->bytes_written() + p.bytes_written());
      total->set_removed(total->removed() + p.removed());
      if (p.done()) return absl::OkStatus();
      EXPECT_NE(p.after(), req.after()) << "a step that did nothing";
      req.set_after(p.after());
      if (*calls > 100) return absl::InternalError("never done");
    }
  }

  TempDir a_, b_;
  EmbeddedHost host_{"h"};
};

TEST_F(CopyTreeTest, CopiesInStepsThatResume) {
  int calls = 0;
  proto::CopyProgress p;
  ASSERT_EQ(Run(proto::Copy::COUNT, "//A/", "", 0, &calls, &p),
            absl::OkStatus());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(p.files(), 5u);
  EXPECT_EQ(p.bytes(), (300u << 10) + 1 + 5 + 1);
  EXPECT_EQ(p.bytes_written(), 0u);
  EXPECT_TRUE(Tree(b_.path()).empty());

  // One file (or link) a step: six steps, each going on from the last, and
  // one that finds nothing left.
  ASSERT_TRUE(
      Run(proto::Copy::COPY, "//A/", "//B/.sroute-wl-1/", 1, &calls, &p).ok());
  EXPECT_EQ(calls, 7);
  EXPECT_EQ(p.files(), 5u) << "each file copied once";
  EXPECT_EQ(p.bytes_written(), (300u << 10) + 1 + 5 + 1);
  EXPECT_EQ(Tree(b_ / ".sroute-wl-1"), Tree(a_.path()));
  EXPECT_FALSE(fs::exists(b_ / ".sroute-wl-1/d/pipe")) << "not data";
  EXPECT_FALSE(fs::exists(b_ / ".sroute-wl-1/.sroute-wl-7"))
      << "a swap's folder is not data";
}

TEST_F(CopyTreeTest, SyncWritesOnlyWhatDiffersAndRemovesWhatWent) {
  int calls = 0;
  proto::CopyProgress p;
  ASSERT_TRUE(Run(proto::Copy::COPY, "//A/d", "//B/d", 0, &calls, &p).ok());
  // The writers go on after the first pass.
  {
    std::fstream f(a_ / "d/big", std::ios::in | std::ios::out);
    f.seekp(200 << 10);
    f << "changed";
  }
  Put(a_ / "d/e/small", "hi");  // shorter
  Put(a_ / "d/new", "n");
  fs::remove(a_ / "d/empty");
  Put(b_ / "d/stray/x", "only at B");
  ASSERT_TRUE(Run(proto::Copy::SYNC, "//A/d", "//B/d", 0, &calls, &p).ok());
  EXPECT_EQ(Tree(b_ / "d"), Tree(a_ / "d"));
  // One 64 KiB chunk of big, small's 2 bytes, new's 1.
  EXPECT_EQ(p.bytes_written(), (64u << 10) + 2 + 1);
  EXPECT_EQ(p.removed(), 3u) << "empty, stray and stray/x";
  // Nothing differs: nothing written.
  ASSERT_TRUE(Run(proto::Copy::SYNC, "//A/d", "//B/d", 0, &calls, &p).ok());
  EXPECT_EQ(p.bytes_written(), 0u);
}

TEST_F(CopyTreeTest, RemoveKeepsTheRootAndTheSwapsFolders) {
  int calls = 0;
  proto::CopyProgress p;
  ASSERT_TRUE(Run(proto::Copy::REMOVE, "//A/", "", 0, &calls, &p).ok());
  EXPECT_TRUE(fs::exists(a_.path()));
  EXPECT_EQ(Get(a_ / ".sroute-wl-7/not-mine"), "skipped");
  EXPECT_TRUE(Tree(a_.path()).empty());
  EXPECT_EQ(p.removed(), 10u);  // top, ln, d, d/* (pipe too), d/e/*, z, z/last
}

TEST_F(CopyTreeTest, BadNamesAreRefused) {
  proto::Copy req;
  proto::CopyProgress p;
  req.set_from("A/x");
  req.set_to("//B/x");
  EXPECT_THAT(CopyTree(host_.sswitch(), req, &p).message(),
              HasSubstr("is not a name //ENDPOINT/PATH"));
  req.set_from("//A/d");
  req.set_to("//A/d/inside");
  EXPECT_THAT(CopyTree(host_.sswitch(), req, &p).message(),
              HasSubstr("lies in"));
  req.set_to("//B/../etc");
  EXPECT_THAT(CopyTree(host_.sswitch(), req, &p).message(),
              HasSubstr("is not a name"));
  req.set_from("//nowhere/x");
  req.set_to("//B/x");
  absl::Status s = CopyTree(host_.sswitch(), req, &p);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("//nowhere/x"));
  EXPECT_FALSE(p.done());
}

}  // namespace
}  // namespace sroute

namespace sroute {
namespace {

size_t DelegateReadRules(SSwitch& sw) {
  size_t n = 0;
  for (const RuleInfo& r : sw.ListRules()) {
    if (r.owner.starts_with("delegate:")) ++n;
  }
  return n;
}

// RECLAIM: the ranges track_writes keeps on B come home to A in budgeted
// steps while a writer goes on writing the file; afterwards no read rule
// is left, A's file holds every byte, and reads agree with the writer.
TEST_F(CopyTreeTest, ReclaimBringsTrackedRangesHomeUnderLiveWrites) {
  constexpr size_t kSize = 1 << 20;
  Put(a_ / "vhd", std::string(kSize, 'o'));
  Put(b_ / "tmp", "");
  auto& sw = host_.sswitch();
  auto away =
      sw.Insert(*ParseRule("<*, w, //A/vhd> -> track_writes(); <IO, //B/tmp>"));
  ASSERT_TRUE(away.ok());
  std::mt19937_64 rng(3);
  std::string model(kSize, 'o');
  Mutex mu;
  auto write = [&](uint64_t off, uint64_t len, char c) {
    const std::string data(len, c);
    ASSERT_TRUE(host_
                    .Write("t", "//A/vhd", off,
                           std::span<const char>(data.data(), data.size()))
                    .ok());
    MutexLock l(&mu);
    model.replace(off, len, data);
  };
  for (int i = 0; i < 300; ++i) {
    const uint64_t off = rng() % kSize;
    write(off, std::min<uint64_t>(kSize - off, 1 + rng() % 20000),
          static_cast<char>('a' + i % 26));
  }
  ASSERT_GT(DelegateReadRules(sw), 5u);
  proto::Copy req;
  req.set_mode(proto::Copy::RECLAIM);
  req.set_from("//A/");
  req.set_budget_ms(5);
  req.set_chunk_bytes(64 << 10);
  req.set_rate_bytes_per_s(16 << 20);  // about 80 KiB per step
  proto::CopyProgress p;
  // Writes still go away: nothing to do but say so. (With time enough to
  // see the range come back: a first step slower than the 5 ms budget on a
  // busy machine returned before it could tell.)
  proto::Copy patient = req;
  patient.set_budget_ms(60'000);
  absl::Status refused = CopyTree(sw, patient, &p);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_THAT(std::string(refused.message()), HasSubstr("home first"));
  ASSERT_TRUE(
      sw.Update(
            {*ParseRule("<*, w, //A/vhd> -> track_writes(); <IO, //A/vhd>")},
            {*away})
          .ok());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::mt19937_64 r(4);
    for (int i = 0; !stop; ++i) {
      const uint64_t off = r() % kSize;
      write(off, std::min<uint64_t>(kSize - off, 1 + r() % 9000),
            static_cast<char>('A' + i % 26));
    }
  });
  int calls = 0;
  uint64_t moved = 0;
  for (p.Clear(); !p.done() && calls < 10000; ++calls) {
    absl::Status s = CopyTree(sw, req, &p);
    ASSERT_TRUE(s.ok()) << s;
    moved += p.bytes_written();
  }
  stop = true;
  writer.join();
  EXPECT_TRUE(p.done());
  EXPECT_GT(calls, 1);
  EXPECT_GT(moved, 0u);
  EXPECT_EQ(p.bytes(), 0u);
  EXPECT_EQ(DelegateReadRules(sw), 0u);
  MutexLock l(&mu);
  EXPECT_EQ(Get(a_ / "vhd"), model);
  std::string back(kSize, '\0');
  auto n = host_.Read("t", "//A/vhd", 0, std::span<char>(back));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(back, model);
}

// RECLAIM of a file that shrank while its writes were away: the ranges
// past its new end hold no bytes (its places were cut with it); the reclaim
// brings the rest home, and their read rules go, instead of failing on them
// (the tail-latency app kept retrying such a reclaim).
TEST_F(CopyTreeTest, ReclaimEndsWhenTheFileShrankWhileAway) {
  Put(a_ / "vhd", std::string(64 << 10, 'o'));
  Put(b_ / "tmp", "");
  auto& sw = host_.sswitch();
  auto away =
      sw.Insert(*ParseRule("<*, w, //A/vhd> -> track_writes(); <IO, //B/tmp>"));
  ASSERT_TRUE(away.ok());
  auto write = [&](uint64_t off, const std::string& data) {
    ASSERT_TRUE(host_
                    .Write("t", "//A/vhd", off,
                           std::span<const char>(data.data(), data.size()))
                    .ok());
  };
  write(4096, std::string(8192, 'a'));     // stays inside
  write(40000, std::string(20000, 'b'));   // cut in two
  write(200000, std::string(10000, 'c'));  // past the end, and grew it
  ASSERT_EQ(DelegateReadRules(sw), 3u);
  IoArgs cut;
  cut.size = 50000;
  ASSERT_TRUE(host_.Call("t", Op::kTruncate, "//A/vhd", cut).ok());
  std::string model(64 << 10, 'o');
  model.replace(4096, 8192, std::string(8192, 'a'));
  model.replace(40000, 20000, std::string(20000, 'b'));
  model.resize(50000);
  ASSERT_TRUE(
      sw.Update(
            {*ParseRule("<*, w, //A/vhd> -> track_writes(); <IO, //A/vhd>")},
            {*away})
          .ok());
  proto::Copy req;
  req.set_mode(proto::Copy::RECLAIM);
  req.set_from("//A/");
  proto::CopyProgress p;
  absl::Status s = CopyTree(sw, req, &p);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(p.done());
  EXPECT_EQ(p.bytes(), 0u);
  EXPECT_EQ(p.bytes_written(), 8192u + 10000u);
  EXPECT_EQ(DelegateReadRules(sw), 0u);
  EXPECT_EQ(Get(a_ / "vhd"), model);
  std::string back(model.size() + 100, '\0');
  auto n = host_.Read("t", "//A/vhd", 0, std::span<char>(back));
  ASSERT_TRUE(n.ok()) << n.status();
  back.resize(*n);
  EXPECT_EQ(back, model);
  // The file grows again: the bytes past the old end read as zeros.
  IoArgs grow;
  grow.size = 210000;
  ASSERT_TRUE(host_.Call("t", Op::kTruncate, "//A/vhd", grow).ok());
  std::string tail(10000, 'x');
  n = host_.Read("t", "//A/vhd", 200000, std::span<char>(tail));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(tail.substr(0, *n), std::string(10000, '\0'));
}

}  // namespace
}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: independent cases on one fixture (a volume with its
// control port), which each file of a split would repeat.
// sroute-fuse with a live control port: sroutectl (run as a subprocess)
// adds and removes rules while the volume is mounted and in use.
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "proto/cli_json.pb.h"
#include "tests/util/ctl_json.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/process_threads.h"
#include "tests/util/run_command.h"
#include "tests/util/temp_dir.h"
#include "tests/util/uring_switch.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;
using ::sroute::testing::FromJson;
using ::sroute::testing::kUringSwitchPath;
using ::sroute::testing::MountedVolume;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunCommand;
using ::sroute::testing::SwitchOffCommand;
using ::sroute::testing::TempDir;
using ::sroute::testing::ThreadIdsNamed;
using ::sroute::testing::UringSwitchOn;
using ::sroute::testing::WaitAllThreadsStopped;
using ::sroute::testing::WriteWholeFile;

// Runs sroutectl with `args` (shell words).
std::pair<int, std::string> Ctl(const std::string& args) {
  return RunCommand(std::string(SROUTECTL_BINARY) + " " + args);
}

// The ops counted by rule `id` in `sroutectl stats --json`, or -1.
long long RuleOps(const proto::CtlHostStats& stats, const std::string& id) {
  for (const proto::CtlRule& r : stats.rules()) {
    if (std::to_string(r.id()) == id) return static_cast<long long>(r.ops());
  }
  return -1;
}

// Gauge `name` of `sroutectl stats --json`, or -1.
long long Gauge(const proto::CtlHostStats& stats, const std::string& name) {
  auto it = stats.gauges().find(name);
  return it == stats.gauges().end() ? -1 : it->second;
}

// Writes `data` to `path` with plain POSIX calls; false on any error.
bool PosixWrite(const std::string& path, const std::string& data) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return false;
  bool ok =
      write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  ok = close(fd) == 0 && ok;
  return ok;
}

bool PosixRead(const std::string& path, std::string* out) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  out->clear();
  char buf[65536];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) {
      close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  return close(fd) == 0;
}

class FuseControlTest : public ::testing::Test {
 protected:
  void Mount(const std::string& kernel_cache = "auto",
             const std::vector<std::string>& extra = {}) {
    sock_ = ctl_dir_ / "control.sock";
    std::vector<std::string> args{"--backing",      backing_.path(),
                                  "--endpoint",     "other=" + other_.path(),
                                  "--control",      sock_,
                                  "--kernel-cache", kernel_cache};
    args.insert(args.end(), extra.begin(), extra.end());
    volume_ =
        std::make_unique<MountedVolume>(SROUTE_FUSE_BINARY, mnt_.path(), args);
    ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  }
  void TearDown() override { volume_.reset(); }
  std::string Host() const { return "--host unix:" + sock_; }

  TempDir backing_, other_, mnt_, ctl_dir_;
  std::string sock_;
  std::unique_ptr<MountedVolume> volume_;
};

TEST_F(FuseControlTest, AddListRemoveRuleWhileMounted) {
  WriteWholeFile(other_ / "f", "");
  Mount();
  const std::string f = mnt_ / "f";
  ASSERT_TRUE(PosixWrite(f, "first"));
  EXPECT_EQ(ReadWholeFile(backing_ / "f"), "first");

  auto [rc, out] =
      Ctl(Host() + " rules add '<*, r|w, //home/f> -> <IO, //other/f>'");
  ASSERT_EQ(rc, 0) << out;
  const std::string id = out.substr(0, out.find('\n'));
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(std::all_of(id.begin(), id.end(), ::isdigit)) << out;

  ASSERT_TRUE(PosixWrite(f, "second!"));
  EXPECT_EQ(ReadWholeFile(other_ / "f"), "second!");
  EXPECT_EQ(ReadWholeFile(backing_ / "f"), "first");
  std::string got;
  ASSERT_TRUE(PosixRead(f, &got));
  EXPECT_EQ(got, "second!");

  std::tie(rc, out) = Ctl(Host() + " rules ls");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, id + ": <*, r|w, //home/f> -> <IO, //other/f>\n");
  std::tie(rc, out) = Ctl(Host() + " rules ls --json");
  ASSERT_EQ(rc, 0) << out;
  const proto::CtlRules listed = FromJson<proto::CtlRules>(out);
  ASSERT_EQ(listed.rules_size(), 1) << out;
  EXPECT_EQ(std::to_string(listed.rules(0).id()), id) << out;
  EXPECT_EQ(listed.rules(0).rule(), "<*, r|w, //home/f> -> <IO, //other/f>")
      << out;

  std::tie(rc, out) = Ctl(Host() + " rules rm " + id);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(PosixWrite(f, "third"));
  EXPECT_EQ(ReadWholeFile(backing_ / "f"), "third");
  EXPECT_EQ(ReadWholeFile(other_ / "f"), "second!");
  std::tie(rc, out) = Ctl(Host() + " rules ls");
  EXPECT_EQ(out, "");

  // Errors: a bad rule (exit 1, "sroutectl: COL: reason"), an unknown id.
  std::tie(rc, out) = Ctl(Host() + " rules add '<*, q, //home/f> -> <IO>'");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(out.rfind("sroutectl: ", 0), 0u) << out;
  std::tie(rc, out) = Ctl(Host() + " rules rm 999");
  EXPECT_EQ(rc, 1) << out;
  // Nobody listening: exit 2, naming the path.
  std::tie(rc, out) = Ctl("--host unix:" + (ctl_dir_ / "none.sock") + " stats");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find(ctl_dir_ / "none.sock"), std::string::npos) << out;
}

// sroutectl rules check: offline on a file, then on the volume's live
// table (alone, and with a file's rules as if added); a finding's witness
// does on the volume what the report says.
TEST_F(FuseControlTest, RulesCheckOfflineAndLive) {
  WriteWholeFile(other_ / "g", "on other");
  WriteWholeFile(backing_ / "g", "at home");
  const std::string file = ctl_dir_ / "new.rules";
  WriteWholeFile(file,
                 "# reads of g: shadowed by the live rule below\n"
                 "<*, r, //home/g> -> <IO, //home/h>\n"
                 "<*, r, //home/a> -> <IO, //nowhere/a>\n");
  // Offline, the file alone: nothing shadows its rules and its endpoints
  // are unknown (so not checked); each rule sends reads away from where
  // writes go: two warnings, exit 0.
  auto [rc, out] = Ctl("rules check " + file);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(file + ": 2 rules, 0 errors, 2 warnings"),
            std::string::npos)
      << out;  // each sends reads away from where writes go

  Mount("off");
  std::tie(rc, out) =
      Ctl(Host() + " rules add '<*, *, //home/g> -> <IO, //other/g>'");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Ctl(Host() + " rules check");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("0 errors, 0 warnings"), std::string::npos) << out;
  // The file as if added: its first rule is shadowed, its second a black
  // hole on this host (no endpoint "nowhere"): exit 1.
  std::tie(rc, out) = Ctl(Host() + " rules check " + file);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("warning: shadowed: <*, r, //home/g> -> <IO, //home/h>"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("witness at "), std::string::npos) << out;
  EXPECT_NE(out.find("error: black-hole: <*, r, //home/a>"), std::string::npos)
      << out;
  EXPECT_NE(out.find("has no endpoint nowhere"), std::string::npos) << out;
  // The shadowed rule's witness, a read of //home/g, reads what the live
  // rule routes it to.
  EXPECT_EQ(ReadWholeFile(mnt_ / "g"), "on other");
  // JSON: proto CtlCheck.
  std::tie(rc, out) = Ctl(Host() + " rules check --json " + file);
  EXPECT_EQ(rc, 1) << out;
  const proto::CtlCheck check = FromJson<proto::CtlCheck>(out);
  EXPECT_EQ(check.errors(), 1u) << out;
  bool black_hole = false;
  for (const proto::CtlFinding& f : check.findings()) {
    black_hole |= f.kind() == "black-hole" && f.error() &&
                  f.rule().find("//home/a") != std::string::npos;
  }
  EXPECT_TRUE(black_hole) << out;
}

TEST_F(FuseControlTest, RuleFlipsDuringConcurrentWrites) {
  const std::string routed(4096, 'r');
  WriteWholeFile(backing_ / "routed", routed);
  WriteWholeFile(other_ / "routed", routed);
  Mount();
  const std::string rule = "'<*, r|w, //home/routed> -> <IO, //other/routed>'";

  std::atomic<bool> stop{false};
  std::atomic<int> errors{0}, mismatches{0}, rounds{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      const std::string path = mnt_ / ("w" + std::to_string(t));
      while (!stop.load()) {
        std::string data(8192 + rng() % 65536, '\0');
        for (char& c : data) c = static_cast<char>(rng());
        const size_t sum = std::hash<std::string>{}(data);
        std::string back;
        if (!PosixWrite(path, data) || !PosixRead(path, &back)) {
          errors.fetch_add(1);
          continue;
        }
        if (std::hash<std::string>{}(back) != sum) mismatches.fetch_add(1);
        rounds.fetch_add(1);
      }
    });
  }
  std::string last_id;
  for (int i = 0; i < 20; ++i) {
    auto [rc, out] = Ctl(Host() + " rules add " + rule);
    ASSERT_EQ(rc, 0) << out;
    last_id = out.substr(0, out.find('\n'));
    std::string got;
    EXPECT_TRUE(PosixRead(mnt_ / "routed", &got));
    EXPECT_EQ(got, routed);
    if (i == 19) break;  // keep the last one for stats
    std::tie(rc, out) = Ctl(Host() + " rules rm " + last_id);
    ASSERT_EQ(rc, 0) << out;
  }
  stop.store(true);
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(rounds.load(), 0);

  auto [rc, out] = Ctl(Host() + " stats --json");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_GT(RuleOps(FromJson<proto::CtlHostStats>(out), last_id), 0) << out;
  std::tie(rc, out) = Ctl(Host() + " stats");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("P99_US"), std::string::npos) << out;
}

// The DESIGN §6 update protocol, driven from sroutectl while four threads
// write and verify their own files: quiesce the files, drain, move the bytes
// (here by copying between the backing dirs, as a controller would), flip
// the route, release. The writers must see no error and no stale byte, and
// the sSwitch must count every write exactly once (a rule's or the default
// route's counter).
class LiveRouteFlipTest : public FuseControlTest,
                          public ::testing::WithParamInterface<const char*> {};

TEST_P(LiveRouteFlipTest, WritersSeeNoErrorNoStaleByteAndEveryWriteCounted) {
  constexpr int kThreads = 4, kBlocks = 64, kBlock = 4096;
  ASSERT_EQ(mkdir((backing_ / "d").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((other_ / "d").c_str(), 0755), 0);
  std::vector<std::string> model(kThreads, std::string(kBlocks * kBlock, '\0'));
  for (int t = 0; t < kThreads; ++t) {
    WriteWholeFile(backing_ / ("d/w" + std::to_string(t)), model[t]);
  }
  // "off-uring": cache off, requests on io_uring queues.
  std::string mode = GetParam();
  std::vector<std::string> extra;
  if (mode == "off-uring") {
    if (!UringSwitchOn()) {
      GTEST_SKIP() << "this kernel has no FUSE over io_uring";
    }
    mode = "off";
    extra = {"--io-uring=on"};
  } else {
    extra = {"--io-uring=off"};
  }
  Mount(mode, extra);
  auto stats = [&] {
    auto [rc, out] = Ctl(Host() + " stats --json");
    EXPECT_EQ(rc, 0) << out;
    return rc == 0 ? FromJson<proto::CtlHostStats>(out) : proto::CtlHostStats();
  };
  auto unmatched_writes = [&](const proto::CtlHostStats& s) {
    auto it = s.unmatched_ops().find("write");
    return it == s.unmatched_ops().end() ? 0
                                         : static_cast<long long>(it->second);
  };
  const long long writes_before = unmatched_writes(stats());

  std::atomic<bool> stop{false};
  std::atomic<long long> writes{0};
  std::atomic<int> errors{0}, stale{0};
  std::vector<std::thread> writers;
  // A failed assertion returns early: stop and join the writers (and leave
  // nothing quiesced) before the volume goes.
  struct Joiner {
    std::atomic<bool>* stop;
    std::vector<std::thread>* threads;
    std::function<void()> release;
    ~Joiner() {
      if (release) release();
      stop->store(true);
      for (std::thread& t : *threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{&stop, &writers, nullptr};
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      const std::string path = mnt_ / ("d/w" + std::to_string(t));
      const int fd = open(path.c_str(), O_RDWR);
      if (fd < 0) {
        errors.fetch_add(1);
        return;
      }
      std::mt19937_64 rng(t);
      std::string block(kBlock, '\0'), back(kBlock, '\0');
      while (!stop.load()) {
        const off_t off = static_cast<off_t>(rng() % kBlocks) * kBlock;
        for (char& c : block) c = static_cast<char>(rng());
        if (pwrite(fd, block.data(), kBlock, off) != kBlock) {
          errors.fetch_add(1);
          continue;
        }
        writes.fetch_add(1);
        model[t].replace(off, kBlock, block);
        // Read back this block and one written earlier.
        const off_t other = static_cast<off_t>(rng() % kBlocks) * kBlock;
        for (off_t at : {off, other}) {
          if (pread(fd, back.data(), kBlock, at) != kBlock) {
            errors.fetch_add(1);
          } else if (back.compare(0, kBlock, model[t], at, kBlock) != 0) {
            stale.fetch_add(1);
          }
        }
      }
      close(fd);
    });
  }

  const std::string files = "'<*, *, //home/d/*>'";
  joiner.release = [&] { Ctl(Host() + " quiesce " + files + " off"); };
  long long rule_writes = 0;
  std::string write_rule;  // id of the installed write rule, if any
  std::string read_rule;
  long long writes_seen = 0;
  for (int round = 0; round < 12; ++round) {
    // Each route sees writes before it flips, however slow the machine.
    while (writes.load() < writes_seen + 20 && errors.load() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    writes_seen = writes.load();
    auto [rc, out] = Ctl(Host() + " quiesce " + files + " on");
    ASSERT_EQ(rc, 0) << out;
    std::tie(rc, out) = Ctl(Host() + " drain " + files);
    ASSERT_EQ(rc, 0) << out;
    const bool to_other = write_rule.empty();
    for (int t = 0; t < kThreads; ++t) {
      const std::string name = "d/w" + std::to_string(t);
      WriteWholeFile(to_other ? other_ / name : backing_ / name,
                     ReadWholeFile(to_other ? backing_ / name : other_ / name));
    }
    if (to_other) {
      std::tie(rc, out) = Ctl(Host() +
                              " rules add '<*, w, //home/d/*> -> "
                              "<IO, //other/d/*>' '<*, r, //home/d/*> -> "
                              "<IO, //other/d/*>'");
      ASSERT_EQ(rc, 0) << out;
      const size_t nl = out.find('\n');
      write_rule = out.substr(0, nl);
      read_rule = out.substr(nl + 1, out.find('\n', nl + 1) - nl - 1);
    } else {
      // Quiesced and drained: the write rule's count is final.
      const long long n = RuleOps(stats(), write_rule);
      ASSERT_GE(n, 0);
      rule_writes += n;
      std::tie(rc, out) =
          Ctl(Host() + " rules rm " + write_rule + " " + read_rule);
      ASSERT_EQ(rc, 0) << out;
      write_rule.clear();
    }
    std::tie(rc, out) = Ctl(Host() + " quiesce " + files + " off");
    ASSERT_EQ(rc, 0) << out;
  }
  joiner.release = nullptr;
  stop.store(true);
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(stale.load(), 0);
  EXPECT_GT(writes.load(), 0);

  // Every write counted once: by the rule while it was installed, else by
  // the default route.
  const proto::CtlHostStats final_stats = stats();
  ASSERT_TRUE(write_rule.empty());  // an even number of flips ends at home
  EXPECT_EQ(rule_writes + unmatched_writes(final_stats) - writes_before,
            writes.load())
      << final_stats.DebugString();
  EXPECT_GT(rule_writes, 0);
  // Home holds every acknowledged write.
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(ReadWholeFile(backing_ / ("d/w" + std::to_string(t))) ==
                model[t])
        << "w" << t;
  }
}

// --kernel-cache=auto: the kernel keeps the pages of a file no rule routes
// (a change behind the mount's back stays unseen), and a rule change drops
// exactly the pages of the files it matches.
TEST_F(FuseControlTest, KernelCacheAutoKeepsPagesUntilARouteChanges) {
  WriteWholeFile(backing_ / "f", "home-1");
  WriteWholeFile(backing_ / "g", "gggg-1");
  WriteWholeFile(other_ / "f", "other1");
  Mount("auto");
  auto wait_invalidated = [&] {
    for (int i = 0; i < 500; ++i) {
      auto [rc, out] = Ctl(Host() + " stats --json");
      if (rc == 0 && Gauge(FromJson<proto::CtlHostStats>(out),
                           "fuse_pending_invalidations") == 0) {
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "invalidations still pending";
  };
  std::string got;
  ASSERT_TRUE(PosixRead(mnt_ / "f", &got));
  EXPECT_EQ(got, "home-1");
  ASSERT_TRUE(PosixRead(mnt_ / "g", &got));
  EXPECT_EQ(got, "gggg-1");
  // Same size, same mtime, new bytes, behind the kernel's back: the cached
  // pages win. (A new mtime would let the kernel drop them by itself once
  // the attributes time out, FUSE_AUTO_INVAL_DATA, at whatever moment a slow
  // machine reaches the next read.)
  auto rewrite_keeping_times = [](const std::filesystem::path& p,
                                  const std::string& data) {
    struct stat st {};
    ASSERT_EQ(stat(p.c_str(), &st), 0);
    WriteWholeFile(p, data);
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(utimensat(AT_FDCWD, p.c_str(), times, 0), 0);
  };
  rewrite_keeping_times(backing_ / "f", "home-2");
  rewrite_keeping_times(backing_ / "g", "gggg-2");
  ASSERT_TRUE(PosixRead(mnt_ / "f", &got));
  EXPECT_EQ(got, "home-1") << "auto should have kept f's pages";
  // A handle opened before the change reads through the page cache: only
  // the invalidation makes it see the new route.
  const int early = open((mnt_ / "f").c_str(), O_RDONLY);
  ASSERT_GE(early, 0);
  char buf[16] = {};
  ASSERT_EQ(pread(early, buf, sizeof(buf), 0), 6);
  EXPECT_EQ(std::string(buf, 6), "home-1");

  auto [rc, out] =
      Ctl(Host() + " rules add '<*, r|w, //home/f> -> <IO, //other/f>'");
  ASSERT_EQ(rc, 0) << out;
  const std::string id = out.substr(0, out.find('\n'));
  wait_invalidated();
  ASSERT_EQ(pread(early, buf, sizeof(buf), 0), 6);
  EXPECT_EQ(std::string(buf, 6), "other1");
  close(early);
  ASSERT_TRUE(PosixRead(mnt_ / "f", &got));
  EXPECT_EQ(got, "other1");
  // f is routed now: direct IO, every read reaches the sSwitch.
  WriteWholeFile(other_ / "f", "other2");
  ASSERT_TRUE(PosixRead(mnt_ / "f", &got));
  EXPECT_EQ(got, "other2");
  // g's route did not change: its pages stay.
  ASSERT_TRUE(PosixRead(mnt_ / "g", &got));
  EXPECT_EQ(got, "gggg-1");

  std::tie(rc, out) = Ctl(Host() + " rules rm " + id);
  ASSERT_EQ(rc, 0) << out;
  wait_invalidated();
  ASSERT_TRUE(PosixRead(mnt_ / "f", &got));
  EXPECT_EQ(got, "home-2");
}

INSTANTIATE_TEST_SUITE_P(KernelCache, LiveRouteFlipTest,
                         ::testing::Values("off", "auto", "off-uring"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// A write's data lies in the buffer its worker received the request into,
// and the daemon does not copy it: a parked write keeps that buffer while
// the worker (the only one here) receives other writes into another. Were
// the buffer reused, the parked write would store the later writes' bytes.
TEST_F(FuseControlTest, AParkedWriteKeepsItsDataWhileTheWorkerGoesOn) {
  constexpr size_t kSize = 64 * 1024;
  WriteWholeFile(backing_ / "parked", "");
  Mount("off", {"--threads", "1"});
  const int fd = open((mnt_ / "parked").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  const std::string range = "'<*, w, //home/parked>'";
  auto [rc, out] = Ctl(Host() + " quiesce " + range + " on");
  ASSERT_EQ(rc, 0) << out;
  std::atomic<bool> parked_ok{false}, parked_done{false};
  std::thread parked([&] {
    const std::string data(kSize, 'A');
    parked_ok =
        pwrite(fd, data.data(), kSize, 0) == static_cast<ssize_t>(kSize);
    parked_done = true;
  });
  // No ASSERT until the writer is joined: it would end the test with the
  // thread still running.
  bool is_parked = false;
  for (int i = 0; i < 1000 && !is_parked && !parked_done; ++i) {
    is_parked =
        Ctl(Host() + " stats").second.find("parked 1\n") != std::string::npos;
    if (!is_parked) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(is_parked) << "the write was not parked";
  const std::string later(kSize, 'Z');
  bool later_ok = true;
  for (int i = 0; i < 20 && is_parked; ++i) {
    later_ok = PosixWrite(mnt_ / "later", later) && later_ok;
  }
  EXPECT_TRUE(later_ok);
  EXPECT_FALSE(parked_done.load()) << "the quiesced write went through";
  std::tie(rc, out) = Ctl(Host() + " quiesce " + range + " off");
  EXPECT_EQ(rc, 0) << out;
  if (rc != 0) volume_.reset();  // the parked write then fails: no hang
  parked.join();
  close(fd);
  EXPECT_TRUE(parked_ok.load());
  EXPECT_EQ(ReadWholeFile(backing_ / "parked"), std::string(kSize, 'A'));
  EXPECT_EQ(ReadWholeFile(backing_ / "later"), later);
}

// A read served past libfuse (the raw path) and parked by a quiesce, its
// caller signalled meanwhile: the read waits rather than failing with
// EINTR, the only worker goes on serving other reads, and the release
// answers the parked read with its bytes from another thread. The kernel's
// interrupt for it was answered with ENOSYS: it sent exactly one, and none
// for a second read signalled the same way (without that answer libfuse
// would bounce it back, and with another the kernel would send more).
// (Through /dev/fuse: on io_uring queues the kernel sends an interrupt for
// every signal, each answered with ENOSYS.)
TEST_F(FuseControlTest, AParkedReadOutlastsASignalAndGetsItsBytes) {
  const std::string content = "parked bytes\n";
  WriteWholeFile(backing_ / "parked", content);
  WriteWholeFile(backing_ / "other", "other bytes");
  Mount("off", {"--threads", "1", "--io-uring=off"});
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: an interruptible read would fail
  struct sigaction old {};
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  const std::string range = "'<*, r, //home/parked>'";
  auto interrupts_refused = [&] {
    const std::string stats = Ctl(Host() + " stats").second;
    const std::string key = "fuse_interrupts_refused ";
    const size_t at = stats.find(key);
    return at == std::string::npos ? -1
                                   : std::atoi(stats.c_str() + at + key.size());
  };
  EXPECT_EQ(interrupts_refused(), 0);
  for (int read = 1; read <= 2; ++read) {
    SCOPED_TRACE(read == 1 ? "first read" : "second read");
    const int fd = open((mnt_ / "parked").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << strerror(errno);
    auto [rc, out] = Ctl(Host() + " quiesce " + range + " on");
    ASSERT_EQ(rc, 0) << out;
    std::atomic<ssize_t> parked_result{-2};
    std::atomic<int> parked_errno{0};
    std::string parked_data(64, '\0');
    std::thread parked([&] {
      const ssize_t n = pread(fd, parked_data.data(), parked_data.size(), 0);
      parked_errno = errno;
      parked_result = n;
    });
    bool is_parked = false;
    for (int i = 0; i < 1000 && !is_parked && parked_result == -2; ++i) {
      is_parked =
          Ctl(Host() + " stats").second.find("parked 1\n") != std::string::npos;
      if (!is_parked) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    EXPECT_TRUE(is_parked) << "the read was not parked";
    for (int i = 0; i < 3 && is_parked; ++i) {
      pthread_kill(parked.native_handle(), SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    bool others_ok = true;
    for (int i = 0; i < 20 && is_parked; ++i) {
      others_ok = ReadWholeFile(mnt_ / "other") == "other bytes" && others_ok;
    }
    EXPECT_TRUE(others_ok);
    EXPECT_EQ(parked_result.load(), -2) << "the quiesced read returned early";
    // The kernel sends the interrupt once the parked thread has run its
    // handler: on the first read, wait for it; after it, no other comes.
    if (read == 1) {
      EXPECT_TRUE(Eventually([&] { return interrupts_refused() >= 1; }));
    }
    EXPECT_EQ(interrupts_refused(), 1);
    std::tie(rc, out) = Ctl(Host() + " quiesce " + range + " off");
    EXPECT_EQ(rc, 0) << out;
    if (rc != 0) volume_.reset();  // the parked read then fails: no hang
    parked.join();
    close(fd);
    EXPECT_EQ(parked_result.load(), static_cast<ssize_t>(content.size()))
        << strerror(parked_errno.load());
    EXPECT_EQ(parked_data.substr(0, content.size()), content);
    if (rc != 0) break;
  }
  sigaction(SIGUSR1, &old, nullptr);
  EXPECT_EQ(ReadWholeFile(mnt_ / "other"), "other bytes");
}

// Direct writes to one file do not queue behind each other in the kernel:
// with a write parked by a quiesced range, a direct write elsewhere in the
// file still completes (the daemon asks for FOPEN_PARALLEL_DIRECT_WRITES;
// without it the parked write would hold the inode's lock). In both cache
// modes (with auto, an O_DIRECT open gets direct IO), and for the handles
// that open(2) and create(2) return.
class ParallelDirectWritesTest
    : public FuseControlTest,
      public ::testing::WithParamInterface<std::tuple<const char*, bool>> {};

TEST_P(ParallelDirectWritesTest, AParkedWriteDoesNotHoldUpOthers) {
  // FOPEN_PARALLEL_DIRECT_WRITES came with Linux 6.2; older kernels ignore it.
  utsname u{};
  int major = 0, minor = 0;
  ASSERT_EQ(uname(&u), 0);
  ASSERT_EQ(std::sscanf(u.release, "%d.%d", &major, &minor), 2) << u.release;
  if (major < 6 || (major == 6 && minor < 2)) {
    GTEST_SKIP() << "kernel " << u.release << " has no parallel direct writes";
  }
  const auto [cache_mode, from_create] = GetParam();
  constexpr size_t kBlock = 4096, kBlocks = 16;
  Mount(cache_mode);
  const std::string db = mnt_ / "db";
  std::unique_ptr<void, decltype(&std::free)> fill(
      std::aligned_alloc(kBlock, kBlocks * kBlock), &std::free);
  std::memset(fill.get(), 'x', kBlocks * kBlock);
  // The parked writer's handle: from create(2) (the file is new), or from
  // open(2) of a file made beforehand.
  int parked_fd;
  if (from_create) {
    parked_fd = open(db.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_DIRECT, 0644);
    ASSERT_GE(parked_fd, 0) << strerror(errno);
    ASSERT_EQ(pwrite(parked_fd, fill.get(), kBlocks * kBlock, 0),
              static_cast<ssize_t>(kBlocks * kBlock));
  } else {
    WriteWholeFile(backing_ / "db", std::string(kBlocks * kBlock, 'x'));
    parked_fd = open(db.c_str(), O_WRONLY | O_DIRECT);
    ASSERT_GE(parked_fd, 0) << strerror(errno);
  }
  const std::string range = "'<*, w, //home/db[0:4K]>'";
  auto [rc, out] = Ctl(Host() + " quiesce " + range + " on");
  ASSERT_EQ(rc, 0) << out;

  // Writes `c` over block `b` with O_DIRECT through `fd`; sets `done` after.
  auto direct_write = [&](int fd, int b, char c, std::atomic<int>* done) {
    void* buf = std::aligned_alloc(kBlock, kBlock);
    std::memset(buf, c, kBlock);
    const bool ok = pwrite(fd, buf, kBlock, static_cast<off_t>(b * kBlock)) ==
                    static_cast<ssize_t>(kBlock);
    std::free(buf);
    done->store(ok ? 1 : -1);
  };
  std::atomic<int> parked_done{0}, other_done{0};
  std::thread parked(direct_write, parked_fd, 0, 'A', &parked_done);
  // Parked at the sSwitch (the volume's stats say so) before the others
  // start: only then does "not held up" mean anything.
  EXPECT_TRUE(Eventually([&] {
    return parked_done.load() != 0 ||
           Ctl(Host() + " stats").second.find("parked 1\n") !=
               std::string::npos;
  })) << "the write was never parked";
  EXPECT_EQ(parked_done.load(), 0) << "the quiesced write went through";
  const int other_fd = open(db.c_str(), O_WRONLY | O_DIRECT);
  ASSERT_GE(other_fd, 0) << strerror(errno);
  std::thread other(direct_write, other_fd, 2, 'B', &other_done);
  // Bounded, so that a regression fails instead of hanging the test.
  for (int i = 0; i < 1000 && other_done.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(other_done.load(), 1) << "a write elsewhere waited for the parked";
  EXPECT_EQ(parked_done.load(), 0);

  std::tie(rc, out) = Ctl(Host() + " quiesce " + range + " off");
  EXPECT_EQ(rc, 0) << out;
  parked.join();
  other.join();
  close(parked_fd);
  close(other_fd);
  EXPECT_EQ(parked_done.load(), 1);
  std::string want(kBlocks * kBlock, 'x');
  want.replace(0, kBlock, kBlock, 'A');
  want.replace(2 * kBlock, kBlock, kBlock, 'B');
  EXPECT_EQ(ReadWholeFile(backing_ / "db"), want);
}

INSTANTIATE_TEST_SUITE_P(CacheModeAndHandle, ParallelDirectWritesTest,
                         ::testing::Combine(::testing::Values("off", "auto"),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_create"
                                                           : "_open");
                         });

}  // namespace
}  // namespace sroute

namespace sroute {
namespace {

// The CPUs the kernel keeps FUSE io_uring queues for.
int PossibleCpus() {
  std::ifstream in("/sys/devices/system/cpu/possible");
  std::string text;
  in >> text;
  const size_t dash = text.find_last_of("-,");
  return std::atoi(text.c_str() + (dash == std::string::npos ? 0 : dash + 1)) +
         1;
}

// Pins the calling thread to `cpu`.
bool PinTo(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof(one), &one) == 0;
}

// A volume serving FUSE requests on io_uring queues (--io-uring), with the
// kernel's switch for it on.
class FuseUringTest : public FuseControlTest {
 protected:
  void SetUp() override {
    if (!UringSwitchOn()) {
      GTEST_SKIP() << "this kernel has no FUSE over io_uring ("
                   << kUringSwitchPath << ")";
    }
  }
  // The value of gauge `name` in `sroutectl stats`, -1 if missing.
  long long Gauge(const std::string& name) {
    const std::string stats = Ctl(Host() + " stats").second;
    const std::string key = "\n" + name + " ";
    const size_t at = stats.find(key);
    return at == std::string::npos
               ? -1
               : std::atoll(stats.c_str() + at + key.size());
  }
};

TEST_F(FuseUringTest, ServesRoutedIoOnPerCpuQueuesAndEndsCleanly) {
  WriteWholeFile(other_ / "routed", "");
  Mount("off", {"--io-uring"});
  // The queues start once the kernel's INIT is answered, after the mount.
  const size_t expected_threads = 2 * PossibleCpus();
  for (int i = 0;
       i < 1000 &&
       ThreadIdsNamed(volume_->pid(), "fuse-uring").size() < expected_threads;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ThreadIdsNamed(volume_->pid(), "fuse-uring").size(),
            expected_threads);
  const long long before = Gauge("fuse_uring_requests");
  EXPECT_GE(before, 0);

  // Writes and reads larger than one request (1 MiB), at an odd offset.
  std::string big(1 << 20 | 12345, '\0');
  std::mt19937 random(7);
  for (char& c : big) c = static_cast<char>(random());
  const int fd = open((mnt_ / "big").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  ASSERT_EQ(pwrite(fd, big.data(), big.size(), 4321),
            static_cast<ssize_t>(big.size()));
  std::string back(big.size(), '\0');
  ASSERT_EQ(pread(fd, back.data(), back.size(), 4321),
            static_cast<ssize_t>(back.size()));
  EXPECT_TRUE(back == big);
  ASSERT_EQ(close(fd), 0);
  EXPECT_TRUE(ReadWholeFile(backing_ / "big").substr(4321) == big);

  // Routing applies as on /dev/fuse.
  auto [rc, out] = Ctl(
      Host() + " rules add '<*, r|w, //home/routed> -> <IO, //other/routed>'");
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(PosixWrite(mnt_ / "routed", "routed bytes"));
  EXPECT_EQ(ReadWholeFile(other_ / "routed"), "routed bytes");
  std::string got;
  ASSERT_TRUE(PosixRead(mnt_ / "routed", &got));
  EXPECT_EQ(got, "routed bytes");

  // Metadata: every op kind the libfuse handlers answer.
  ASSERT_EQ(mkdir((mnt_ / "d").c_str(), 0755), 0);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(PosixWrite(mnt_ / ("d/f" + std::to_string(i)), "x"));
  }
  ASSERT_EQ(rename((mnt_ / "d/f0").c_str(), (mnt_ / "d/g").c_str()), 0);
  ASSERT_EQ(chmod((mnt_ / "d/g").c_str(), 0600), 0);
  struct stat st {};
  ASSERT_EQ(stat((mnt_ / "d/g").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(mnt_ / "d")) {
    names.push_back(e.path().filename());
  }
  EXPECT_EQ(names.size(), 300u);
  for (const std::string& n : names) {
    ASSERT_EQ(unlink((mnt_ / ("d/" + n)).c_str()), 0) << n;
  }
  ASSERT_EQ(rmdir((mnt_ / "d").c_str()), 0);
  EXPECT_EQ(open((mnt_ / "missing").c_str(), O_RDONLY), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_GE(Gauge("fuse_uring_requests"), before + 900)
      << "requests did not come through the io_uring queues";

  // An unmount ends the daemon with status 0.
  auto [urc, uout] = RunCommand("fusermount3 -u " + mnt_.path());
  ASSERT_EQ(urc, 0) << uout;
  const int status = volume_->WaitExit(std::chrono::seconds(10));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

// A request that waits (parked by a quiesce) holds a queue thread; its
// reply comes on another thread, when the range is released, and reaches
// the caller through the ring. Other callers go on meanwhile.
TEST_F(FuseUringTest, ParkedRequestIsAnsweredFromAnotherThread) {
  const std::string content = "parked bytes\n";
  WriteWholeFile(backing_ / "parked", content);
  WriteWholeFile(backing_ / "other", "other bytes");
  Mount("off", {"--io-uring"});
  const std::string range = "'<*, r, //home/parked>'";
  const int fd = open((mnt_ / "parked").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  auto [rc, out] = Ctl(Host() + " quiesce " + range + " on");
  ASSERT_EQ(rc, 0) << out;
  std::atomic<ssize_t> result{-2};
  std::string data(64, '\0');
  std::thread reader([&] { result = pread(fd, data.data(), data.size(), 0); });
  bool is_parked = false;
  for (int i = 0; i < 1000 && !is_parked && result == -2; ++i) {
    is_parked =
        Ctl(Host() + " stats").second.find("parked 1\n") != std::string::npos;
    if (!is_parked) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(is_parked) << "the read was not parked";
  for (int i = 0; i < 50; ++i) {
    ASSERT_EQ(ReadWholeFile(mnt_ / "other"), "other bytes");
  }
  EXPECT_EQ(result.load(), -2) << "the quiesced read returned early";
  std::tie(rc, out) = Ctl(Host() + " quiesce " + range + " off");
  EXPECT_EQ(rc, 0) << out;
  if (rc != 0) volume_.reset();  // the parked read then fails: no hang
  reader.join();
  close(fd);
  EXPECT_EQ(result.load(), static_cast<ssize_t>(content.size()));
  EXPECT_EQ(data.substr(0, content.size()), content);
}

// Queue threads run as SCHED_IDLE (so that a reply wakes its caller on
// their CPU); a thread that busy work on its CPU keeps from running is run
// at normal priority: a caller sharing CPU 0 with a spinning thread still
// gets its reads, and the volume counts the boost.
TEST_F(FuseUringTest, QueueThreadStarvedByBusyCpuIsBoosted) {
  std::string content(4096, 'q');
  WriteWholeFile(backing_ / "f", content);
  Mount("off", {"--io-uring"});
  std::atomic<bool> stop{false};
  std::thread spinner([&] {
    if (!PinTo(0)) return;
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  long long boosts = 0;
  bool reads_ok = true;
  std::thread reader([&] {
    reads_ok = PinTo(0);
    const int fd = open((mnt_ / "f").c_str(), O_RDONLY);
    reads_ok = reads_ok && fd >= 0;
    std::string buf(4096, '\0');
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (int i = 0; reads_ok && std::chrono::steady_clock::now() < deadline;
         ++i) {
      reads_ok = pread(fd, buf.data(), buf.size(), 0) == 4096 && buf == content;
      if (i % 200 == 199 && (boosts = Gauge("fuse_uring_boosts")) > 0) break;
    }
    if (fd >= 0) close(fd);
  });
  reader.join();
  stop = true;
  spinner.join();
  EXPECT_TRUE(reads_ok);
  EXPECT_GT(boosts, 0) << "no queue thread was boosted";
}

// io_uring turned on from a config file (io_uring: true) and from an fstab
// line (mount.fuse.sroute -o io_uring).
TEST_F(FuseUringTest, TurnedOnFromAConfigFileOrAnFstabLine) {
  sock_ = ctl_dir_ / "config.sock";
  const std::string config = ctl_dir_ / "volume.conf";
  WriteWholeFile(config, "backing: \"" + backing_.path() +
                             "\"\ncontrol_socket: \"" + sock_ +
                             "\"\nio_uring: true\n");
  volume_ = std::make_unique<MountedVolume>(
      SROUTE_FUSE_BINARY, mnt_.path(),
      std::vector<std::string>{"--config", config});
  ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  WriteWholeFile(mnt_ / "c", "config");
  EXPECT_GT(Gauge("fuse_uring_requests"), 0);
  volume_.reset();

  sock_ = ctl_dir_ / "fstab.sock";
  const std::string helper =
      std::filesystem::path(SROUTE_FUSE_BINARY).parent_path() /
      "mount.fuse.sroute";
  auto [rc, out] =
      RunCommand(helper + " " + backing_.path() + " " + mnt_.path() +
                 " -o defaults,io_uring,control=" + sock_);
  ASSERT_EQ(rc, 0) << out;
  WriteWholeFile(mnt_ / "f", "fstab");
  EXPECT_EQ(ReadWholeFile(backing_ / "f"), "fstab");
  EXPECT_GT(Gauge("fuse_uring_requests"), 0);
  EXPECT_EQ(RunCommand("fusermount3 -u " + mnt_.path()).first, 0);
}

// --io-uring=on while the kernel's switch is off: a clear error, no mount.
// (The switch reads N in a mount namespace of the daemon's own: other
// tests' volumes may be on io_uring queues.)
TEST(FuseUringSwitchTest, OnIsRefusedWhileTheKernelSwitchIsOff) {
  if (!UringSwitchOn()) {
    GTEST_SKIP() << "this kernel has no FUSE over io_uring ("
                 << kUringSwitchPath << ")";
  }
  TempDir scratch, backing, mnt;
  auto [rc, out] = RunCommand(
      SwitchOffCommand(scratch.path(), std::string(SROUTE_FUSE_BINARY) + " " +
                                           mnt.path() + " -f --backing " +
                                           backing.path() + " --io-uring=on"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("echo Y > /sys/module/fuse/parameters/enable_uring"),
            std::string::npos)
      << out;
}

// By default (auto) a volume whose kernel has the switch off serves through
// /dev/fuse, and says why at start.
TEST(FuseUringSwitchTest, AutoServesThroughDevFuseWhileTheSwitchIsOff) {
  if (!UringSwitchOn()) {
    GTEST_SKIP() << "this kernel has no FUSE over io_uring ("
                 << kUringSwitchPath << ")";
  }
  TempDir scratch, backing, mnt;
  const std::string log = scratch / "log";
  // The mount lives in the namespace: the whole visit runs there.
  const std::string visit =
      std::string(SROUTE_FUSE_BINARY) + " " + mnt.path() + " -f --backing " +
      backing.path() + " > " + log + " 2>&1 & pid=$!; " +
      "for i in $(seq 100); do mountpoint -q " + mnt.path() +
      " && break; sleep 0.1; done; echo through > " + mnt.path() +
      "/f && cat " + mnt.path() + "/f; fusermount3 -u " + mnt.path() +
      "; wait $pid";
  auto [rc, out] = RunCommand(SwitchOffCommand(scratch.path(), visit));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "through\n");
  EXPECT_EQ(ReadWholeFile(backing / "f"), "through\n");
  const std::string said = ReadWholeFile(log);
  EXPECT_NE(said.find("FUSE requests through /dev/fuse, not io_uring queues: "
                      "FUSE over io_uring is off in this kernel"),
            std::string::npos)
      << said;
}

TEST_F(FuseUringTest, QueuesAreTheDefaultWhenTheKernelOffersThem) {
  Mount("off");
  WriteWholeFile(mnt_ / "f", "default");
  EXPECT_EQ(ReadWholeFile(mnt_ / "f"), "default");
  EXPECT_GT(Gauge("fuse_uring_requests"), 0);
  EXPECT_EQ(ThreadIdsNamed(volume_->pid(), "fuse-uring").size(),
            2 * static_cast<size_t>(PossibleCpus()));
}

TEST_F(FuseUringTest, OffServesThroughDevFuse) {
  Mount("off", {"--io-uring=off"});
  WriteWholeFile(mnt_ / "f", "off");
  EXPECT_EQ(ReadWholeFile(mnt_ / "f"), "off");
  EXPECT_EQ(Gauge("fuse_uring_requests"), 0);
  EXPECT_TRUE(ThreadIdsNamed(volume_->pid(), "fuse-uring").empty());
}

void PinToCpu0() {
  cpu_set_t zero;
  CPU_ZERO(&zero);
  CPU_SET(0, &zero);
  ASSERT_EQ(sched_setaffinity(0, sizeof(zero), &zero), 0) << strerror(errno);
}

// A file whose endpoint stopped answering (a FUSE filesystem whose daemon
// is stopped) holds a helper, not its CPU's queue thread: while a read and
// an fsync of it wait, IO to other files from the same CPU completes; the
// two complete, right, once the endpoint answers again.
TEST_F(FuseUringTest, AStuckEndpointHoldsNoQueueThread) {
  TempDir inner_backing, inner_mnt;
  WriteWholeFile(inner_backing / "slow", "slow bytes");
  MountedVolume inner(SROUTE_FUSE_BINARY, inner_mnt.path(),
                      {"--backing", inner_backing.path(), "--kernel-cache",
                       "off", "--io-uring=off"});
  ASSERT_TRUE(inner.ok());
  Mount("off", {"--io-uring=on", "--endpoint", "stuck=" + inner_mnt.path()});
  auto [rc, out] =
      Ctl(Host() + " rules add '<*, *, //home/slow> -> <IO, //stuck/slow>'");
  ASSERT_EQ(rc, 0) << out;
  const int slow = open((mnt_ / "slow").c_str(), O_RDWR);
  ASSERT_GE(slow, 0) << strerror(errno);
  ASSERT_EQ(kill(inner.pid(), SIGSTOP), 0);
  // Not yet stopped, a thread of it could still take the read below and
  // answer it (CI under ASan: a read came back while the fsync waited).
  ASSERT_TRUE(WaitAllThreadsStopped(inner.pid()));

  std::atomic<int> stuck_done{0};
  std::string stuck_read(10, '\0');
  ssize_t read_rc = -2;
  int fsync_rc = -2;
  std::thread reader([&] {
    PinToCpu0();
    read_rc = pread(slow, stuck_read.data(), stuck_read.size(), 0);
    ++stuck_done;
  });
  std::thread syncer([&] {
    PinToCpu0();
    fsync_rc = fsync(slow);
    ++stuck_done;
  });
  // Both calls are on their way to the stopped daemon (or waiting in it),
  // each holding a helper, not a queue thread.
  EXPECT_TRUE(Eventually([&] { return Gauge("fuse_uring_helper_busy") >= 2; }))
      << Gauge("fuse_uring_helper_busy");

  auto others = std::async(std::launch::async, [&]() -> std::string {
    PinToCpu0();
    for (int i = 0; i < 200; ++i) {
      const std::string name = mnt_ / ("other" + std::to_string(i % 4));
      const std::string data = "block " + std::to_string(i);
      const int fd = open(name.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) return "open " + name + ": " + strerror(errno);
      std::string back(data.size(), '\0');
      const bool ok = pwrite(fd, data.data(), data.size(), 0) ==
                          static_cast<ssize_t>(data.size()) &&
                      fsync(fd) == 0 &&
                      pread(fd, back.data(), back.size(), 0) ==
                          static_cast<ssize_t>(back.size()) &&
                      back == data;
      close(fd);
      if (!ok) return "IO on " + name + " failed or read back wrong";
      if (i % 4 == 3 && unlink(name.c_str()) != 0) return "unlink " + name;
    }
    return "";
  });
  // Not a timing assert: a minute stands for "never" here.
  const bool finished =
      others.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  EXPECT_TRUE(finished) << "IO to other files waited behind the stuck one";
  EXPECT_EQ(stuck_done.load(), 0) << "the endpoint was not stuck";
  ASSERT_EQ(kill(inner.pid(), SIGCONT), 0);
  reader.join();
  syncer.join();
  EXPECT_EQ(others.get(), "");
  EXPECT_EQ(read_rc, 10);
  EXPECT_EQ(stuck_read, "slow bytes");
  EXPECT_EQ(fsync_rc, 0) << strerror(errno);
  close(slow);
}

}  // namespace
}  // namespace sroute

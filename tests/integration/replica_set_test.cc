// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: independent cases on one fixture (a volume over three
// servers), which each file of a split would repeat.
// Replica sets for real (issue 23): a FUSE volume whose rep/ folder is kept
// on three storage servers by a replica_set stage, servers killed and
// restarted under load, resync, and sroutectl replicas.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "proto/cli_json.pb.h"
#include "tests/integration/posix_scenarios.h"
#include "tests/integration/server_fixture.h"
#include "tests/util/ctl_json.h"
#include "tests/util/gc_passes.h"
#include "tests/util/real_programs.h"
#include "tests/util/run_as.h"
#include "tests/util/wait.h"
#include "tools/exercise/exerciser.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;
using ::sroute::testing::Exercise;
using ::sroute::testing::ExerciseOptions;
using ::sroute::testing::ExerciseResult;
using ::sroute::testing::GitAs;
using ::sroute::testing::GitOk;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::ServerProcess;
using ::sroute::testing::SqliteSessionAs;
using ::sroute::testing::WriteWholeFile;

constexpr size_t kBlock = 4096;

// A block that names itself: "B<index> V<version>\n" and then a letter of
// both, so a reader can tell a whole, current block from a torn or old one.
std::string Block(uint32_t index, uint32_t version) {
  char head[32];
  const int n = snprintf(head, sizeof head, "B%06u V%08u\n", index, version);
  std::string b(kBlock, static_cast<char>('a' + (index * 31 + version) % 26));
  b.replace(0, static_cast<size_t>(n), head, static_cast<size_t>(n));
  return b;
}

// The version `b` holds if it is block `index` whole; -1 if it is not.
int64_t VersionOf(const std::string& b, uint32_t index) {
  unsigned i = 0, v = 0;
  if (b.size() != kBlock || sscanf(b.c_str(), "B%06u V%08u\n", &i, &v) != 2 ||
      i != index) {
    return -1;
  }
  return b == Block(index, v) ? static_cast<int64_t>(v) : -1;
}

// Writers and readers of the version-stamped blocks of one file, on
// threads of their own until Stop() (or the end of the test, however it
// ends). Writer w writes only the blocks b with b % writers == w, each with
// the next version, and records it once acknowledged; a reader checks that
// a block is whole and not older than the version acknowledged before its
// read began.
class BlockLoad {
 public:
  BlockLoad(const std::string& path, uint32_t blocks, int writers, int readers,
            std::chrono::milliseconds pause = std::chrono::milliseconds(0))
      : acked(blocks) {
    for (int w = 0; w < writers; ++w) {
      threads_.emplace_back([this, path, blocks, writers, w, pause] {
        const int fd = open(path.c_str(), O_WRONLY);
        std::mt19937 rng(w);
        while (!stop_.load()) {
          const uint32_t b = (rng() % (blocks / writers)) * writers + w;
          const uint32_t v = acked[b].load() + 1;
          const std::string data = Block(b, v);
          if (pwrite(fd, data.data(), kBlock, static_cast<off_t>(b) * kBlock) ==
              static_cast<ssize_t>(kBlock)) {
            acked[b].store(v);
            ++writes;
          } else {
            ++write_errors;
          }
          std::this_thread::sleep_for(pause);
        }
        close(fd);
      });
    }
    for (int r = 0; r < readers; ++r) {
      threads_.emplace_back([this, path, blocks, r] {
        const int fd = open(path.c_str(), O_RDONLY);
        std::mt19937 rng(100 + r);
        std::string buf(kBlock, '\0');
        while (!stop_.load()) {
          const uint32_t b = rng() % blocks;
          const uint32_t before = acked[b].load();
          if (pread(fd, buf.data(), kBlock, static_cast<off_t>(b) * kBlock) !=
              static_cast<ssize_t>(kBlock)) {
            ++read_errors;
            continue;
          }
          ++reads;
          const int64_t v = VersionOf(buf, b);
          if (v < 0) {
            ++torn;
          } else if (v < before) {
            ++older;
          }
        }
        close(fd);
      });
    }
  }
  ~BlockLoad() { Stop(); }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  std::vector<std::atomic<uint32_t>> acked;  // by block
  std::atomic<int> writes{0}, write_errors{0}, reads{0}, read_errors{0};
  std::atomic<int> torn{0}, older{0};

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// Stops and joins a test's own IO threads however the test ends (an ASSERT
// that returns early must not leave them running).
struct JoinOnExit {
  std::atomic<bool>& stop;
  std::vector<std::thread>& threads;
  ~JoinOnExit() {
    stop = true;
    for (std::thread& t : threads) {
      if (t.joinable()) t.join();
    }
  }
};

class ReplicaSetVolumeTest : public ServerTest {
 protected:
  // Three servers and a volume with rep/* through stage rs on them.
  void StartSet(const std::string& options = "",
                std::vector<std::string> extra = {}) {
    // Ordinary users reach rep/ on the volume and on every member (the
    // servers act as the caller).
    for (auto* r : {&r1_, &r2_, &r3_, &home_}) {
      ASSERT_EQ(chmod(r->path().c_str(), 0755), 0);
    }
    for (auto* r : {&r1_, &r2_, &r3_}) {
      ASSERT_EQ(mkdir((*r / "rep").c_str(), 0755), 0);
    }
    ASSERT_EQ(mkdir((home_ / "rep").c_str(), 0755), 0);
    const char* names[] = {"S1", "S2", "S3"};
    testing::TempDir* roots[] = {&r1_, &r2_, &r3_};
    for (int i = 0; i < 3; ++i) {
      ServerProcess* s = StartServer(names[i], roots[i]->path());
      ASSERT_TRUE(s->ok());
      ports_[i] = s->port();
    }
    endpoints_ = {"S1=" + servers_[0]->address(),
                  "S2=" + servers_[1]->address(),
                  "S3=" + servers_[2]->address()};
    host_args_ = {
        "--stage",
        "rs=replica_set:member=S1,member=S2,member=S3,probe_ms=100" +
            std::string(options.find("region_size=") == std::string::npos
                            ? ",region_size=64K"
                            : "") +
            options};
    host_args_.insert(host_args_.end(), extra.begin(), extra.end());
    Mount(endpoints_, kRules, host_args_);
  }
  // A second FUSE host (fuse-test2 at mnt2_, socket in ctl2_) with a stage
  // rs of its own on the same members, as StartSet() made the first.
  void MountSecondHost() {
    std::vector<std::string> args = host_args_;
    args.insert(args.end(), {"--state", ctl2_ / "state"});  // a log of its own
    second_ = MountHost("fuse-test2", mnt2_, ctl2_, endpoints_, kRules, args);
    ASSERT_TRUE(second_->ok()) << "the second host did not mount";
  }
  // What member i holds under rep/: for each node its path, type, mode,
  // owner, size and bytes (so that copies compare whole).
  std::string MemberTree(int i) {
    testing::TempDir* roots[] = {&r1_, &r2_, &r3_};
    const std::string base = *roots[i] / "rep";
    std::string out;
    std::error_code ec;
    std::vector<std::string> lines;
    for (auto it = std::filesystem::recursive_directory_iterator(base, ec);
         !ec && it != std::filesystem::recursive_directory_iterator();
         it.increment(ec)) {
      struct stat st {};
      const std::string path = it->path().string();
      if (lstat(path.c_str(), &st) != 0) continue;
      std::string line =
          path.substr(base.size()) + " " + std::to_string(st.st_mode) + " " +
          std::to_string(st.st_uid) + ":" + std::to_string(st.st_gid);
      if (S_ISREG(st.st_mode)) {
        line += " " + std::to_string(st.st_size) + " " + ContentHash(path);
      } else if (S_ISLNK(st.st_mode)) {
        line += " -> " + std::filesystem::read_symlink(path, ec).string();
      }
      lines.push_back(line);
    }
    std::sort(lines.begin(), lines.end());
    for (const std::string& l : lines) out += l + "\n";
    return out;
  }
  // A hash of the file's non-zero 4 KiB blocks and where they are: holes
  // are skipped (a 5 GiB sparse file hashes at once), and a hole hashes as
  // the zeros a member may have written in its place.
  static std::string ContentHash(const std::string& path) {
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return "<unreadable>";
    size_t h = 0;
    std::string buf(1 << 20, '\0');
    const std::string zeros(4096, '\0');
    for (off_t at = lseek(fd, 0, SEEK_DATA); at >= 0;
         at = lseek(fd, at, SEEK_DATA)) {
      const off_t end = lseek(fd, at, SEEK_HOLE);
      while (at < end) {
        const ssize_t n = pread(fd, buf.data(), buf.size(), at);
        if (n <= 0) break;
        for (ssize_t b = 0; b < n; b += 4096) {
          const std::string_view block(buf.data() + b,
                                       std::min<ssize_t>(4096, n - b));
          if (block == std::string_view(zeros).substr(0, block.size())) {
            continue;
          }
          h = h * 31 + std::hash<std::string_view>()(block) +
              static_cast<size_t>(at + b);
        }
        at += n;
      }
    }
    close(fd);
    return std::to_string(h);
  }
  // Every member holds what member 0 holds under rep/.
  void ExpectMembersIdentical() {
    const std::string first = MemberTree(0);
    EXPECT_FALSE(first.empty());
    EXPECT_EQ(MemberTree(1), first);
    EXPECT_EQ(MemberTree(2), first);
  }

  void TearDown() override {
    second_.reset();  // before the servers go
    ServerTest::TearDown();
  }

  static constexpr const char* kRules =
      "<*, *, //home/rep/*> -> <IO, stage:rs>\n";
  std::vector<std::string> endpoints_, host_args_;
  testing::TempDir mnt2_, ctl2_;
  std::unique_ptr<testing::MountedVolume> second_;
  // Kills (SIGKILL) or brings back server i (same root, same port).
  void KillServer(int i) { servers_[i]->Kill(); }
  void RestartServer(int i) {
    const char* names[] = {"S1", "S2", "S3"};
    testing::TempDir* roots[] = {&r1_, &r2_, &r3_};
    auto s = std::make_unique<ServerProcess>(
        SROUTE_SERVER_BINARY,
        std::vector<std::string>{"--root", roots[i]->path(), "--name", names[i],
                                 "--secret-file", secret_, "--listen",
                                 "127.0.0.1:" + std::to_string(ports_[i])});
    ASSERT_TRUE(s->ok()) << names[i] << " did not start again";
    servers_[i] = std::move(s);
  }
  std::string Status() {
    auto [rc, out] =
        Ctl("--host unix:" + (ctl_ / "sock") + " replicas status rs --json");
    EXPECT_EQ(rc, 0) << out;
    return out;
  }
  // The set rs as `replicas status --json` shows it.
  proto::CtlReplicaSet Set() {
    const proto::CtlReplicaSets sets =
        testing::FromJson<proto::CtlReplicaSets>(Status());
    return sets.sets_size() == 1 ? sets.sets(0) : proto::CtlReplicaSet();
  }
  // `member` as the status shows it (no name if it is not listed).
  proto::CtlReplicaMember MemberOf(const std::string& member) {
    const proto::CtlReplicaSet set = Set();
    for (const proto::CtlReplicaMember& m : set.members()) {
      if (m.name() == member) return m;
    }
    return proto::CtlReplicaMember();
  }
  // `member`'s state in the status ("" if it is not listed).
  std::string StateOf(const std::string& member) {
    return MemberOf(member).state();
  }
  // Waits (up to 60 s) until `member` is in `state`.
  bool WaitState(const std::string& member, const std::string& state) {
    for (int i = 0; i < 600; ++i) {
      if (StateOf(member) == state) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << member << " never " << state << ": " << Status();
    return false;
  }
  // Reads member `member` has served (-1 if it is not listed).
  int64_t ReadsOf(const std::string& member) {
    const proto::CtlReplicaMember m = MemberOf(member);
    return m.name().empty() ? -1 : m.reads();
  }
  int ports_[3] = {0, 0, 0};
  // A controller (its store in `db`) running control app `app`, with
  // stats every 200 ms.
  testing::ServerProcess StartController(const testing::TempDir& db,
                                         const std::string& app) {
    return testing::ServerProcess(
        SROUTE_CONTROLLER_BINARY,
        {"--db", db / "db", "--secret-file", secret_, "--listen", "127.0.0.1:0",
         "--stats-interval-ms", "200", "--app", app});
  }
};

// 4 writers and 4 readers on one replicated file; a member (each in turn,
// the primary too) is SIGKILLed mid-run and restarted: no read fails or returns
// a torn or older block than one acknowledged before it began, no acknowledged
// write is lost, the member is resynced under load (paused and resumed once),
// and the three copies end byte-identical.
class KilledUnderLoadTest : public ReplicaSetVolumeTest,
                            public ::testing::WithParamInterface<int> {};

TEST_P(KilledUnderLoadTest, IsResyncedAndAllEndEqual) {
  const int victim = GetParam();
  const std::string victim_name = "S" + std::to_string(victim + 1);
  StartSet(",read=random");          // the returning member is asked too
  constexpr uint32_t kBlocks = 256;  // 1 MiB: 16 regions
  {
    std::string all;
    for (uint32_t b = 0; b < kBlocks; ++b) all += Block(b, 0);
    WriteWholeFile(mnt_ / "rep/data", all);
  }
  BlockLoad load(mnt_ / "rep/data", kBlocks, 4, 4);
  // Lookups all along (the kernel caches no entry): the file keeps its
  // inode number when another member answers them, or the open handles
  // above would fail with ESTALE.
  std::atomic<bool> stop_stats{false};
  std::atomic<int> stats{0}, stat_errors{0};
  std::vector<std::thread> statter;
  JoinOnExit join_statter{stop_stats, statter};
  statter.emplace_back([&] {
    const std::string path = mnt_ / "rep/data";
    while (!stop_stats.load()) {
      struct stat st {};
      ++(::stat(path.c_str(), &st) == 0 ? stats : stat_errors);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  KillServer(victim);
  // Out once an IO or a probe of the volume's has found it gone.
  ASSERT_TRUE(WaitState(victim_name, "out"));
  auto [rc, out] =
      Ctl("--host unix:" + (ctl_ / "sock") + " replicas resync pause rs");
  ASSERT_EQ(rc, 0) << out;
  RestartServer(victim);
  EXPECT_TRUE(WaitState(victim_name, "stale (resync paused)"));
  std::tie(rc, out) =
      Ctl("--host unix:" + (ctl_ / "sock") + " replicas resync resume rs");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(WaitState(victim_name, "current"));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  load.Stop();
  stop_stats = true;
  statter[0].join();
  EXPECT_GT(stats.load(), 100);
  EXPECT_EQ(stat_errors.load(), 0);
  EXPECT_GT(load.writes.load(), 100);
  EXPECT_GT(load.reads.load(), 100);
  EXPECT_EQ(load.write_errors.load(), 0);
  EXPECT_EQ(load.read_errors.load(), 0);
  EXPECT_EQ(load.torn.load(), 0);
  EXPECT_EQ(load.older.load(), 0);
  const std::string s1 = ReadWholeFile(r1_ / "rep/data");
  ASSERT_EQ(s1.size(), kBlocks * kBlock);
  for (uint32_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(VersionOf(s1.substr(b * kBlock, kBlock), b),
              static_cast<int64_t>(load.acked[b].load()))
        << "block " << b;
  }
  EXPECT_TRUE(ReadWholeFile(r2_ / "rep/data") == s1);
  EXPECT_TRUE(ReadWholeFile(r3_ / "rep/data") == s1);
  EXPECT_GT(Set().resync_bytes(), 0) << Status();
}

INSTANTIATE_TEST_SUITE_P(Member, KilledUnderLoadTest, ::testing::Range(0, 3),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "S" + std::to_string(p.param + 1);
                         });

// S3 down, write; S3 up and S2 down, write; S2 up and S1 down, write.
// With resync between the steps (the member that came back is current
// before the next goes down) every write is acknowledged and every read
// returns the last one. With resync paused, returning members stay stale:
// a write that reaches too few current members is refused (EIO), and a
// read returns the last acknowledged value, a newer one (a refused write
// some member applied), or an error, never an older one. Either way the
// three copies end identical once all are back and resynced.
class RollingFailuresTest : public ReplicaSetVolumeTest,
                            public ::testing::WithParamInterface<bool> {};

TEST_P(RollingFailuresTest, NeverShowAnOlderValue) {
  const bool paused = GetParam();
  StartSet();
  const std::string f = mnt_ / "rep/f";
  WriteWholeFile(f, "v0");
  auto write = [&](int v) {
    const std::string text = "v" + std::to_string(v);
    const int fd = open(f.c_str(), O_WRONLY);
    const bool ok = fd >= 0 && pwrite(fd, text.data(), 2, 0) == 2;
    const int err = errno;
    if (fd >= 0) close(fd);
    errno = err;
    return ok;
  };
  // The value read (-1: an error).
  auto read = [&]() -> int {
    std::string buf(2, '\0');
    const int fd = open(f.c_str(), O_RDONLY);
    if (fd < 0) return -1;
    const ssize_t n = pread(fd, buf.data(), 2, 0);
    close(fd);
    return n == 2 && buf[0] == 'v' ? buf[1] - '0' : -1;
  };
  const std::string host = "--host unix:" + (ctl_ / "sock");
  if (paused) {
    ASSERT_EQ(Ctl(host + " replicas resync pause rs").first, 0);
  }
  int acked = 0, highest = 0;
  // The last acknowledged value, a newer one a refused write left, or an
  // error; with resync between the steps, the last acknowledged one.
  auto check_reads = [&](int step) {
    for (int i = 0; i < 20; ++i) {
      const int v = read();
      ASSERT_TRUE(v == -1 || (v >= acked && v <= highest))
          << "step " << step << " read v" << v << ", v" << acked << " acked";
      if (!paused) {
        ASSERT_EQ(v, acked) << "step " << step;
      }
    }
  };
  const int order[] = {2, 1, 0};
  for (int step = 0; step < 3; ++step) {
    if (step > 0) {
      RestartServer(order[step - 1]);
      const std::string name = "S" + std::to_string(order[step - 1] + 1);
      if (paused) {  // back in the set; stale if it missed a write made
        for (int i = 0; i < 600 && StateOf(name) == "out"; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        ASSERT_NE(StateOf(name), "out");
      } else {
        ASSERT_TRUE(WaitState(name, "current"));
      }
    }
    KillServer(order[step]);
    ASSERT_NO_FATAL_FAILURE(check_reads(step));
    highest = step + 1;
    if (write(step + 1)) {
      acked = step + 1;
    } else {
      ASSERT_EQ(errno, EIO) << "step " << step;
      ASSERT_TRUE(paused) << "step " << step << ": " << strerror(errno);
    }
    ASSERT_NO_FATAL_FAILURE(check_reads(step));
  }
  RestartServer(0);
  if (paused) {
    ASSERT_EQ(Ctl(host + " replicas resync resume rs").first, 0);
  }
  EXPECT_TRUE(WaitState("S1", "current"));
  EXPECT_TRUE(WaitState("S2", "current"));
  EXPECT_TRUE(WaitState("S3", "current"));
  const std::string now = ReadWholeFile(r1_ / "rep/f");
  EXPECT_GE(now[1] - '0', acked) << now;
  if (!paused) {
    EXPECT_EQ(now, "v3");
  }
  EXPECT_EQ(ReadWholeFile(r2_ / "rep/f"), now);
  EXPECT_EQ(ReadWholeFile(r3_ / "rep/f"), now);
  EXPECT_EQ(ReadWholeFile(f), now);
}

INSTANTIATE_TEST_SUITE_P(Resync, RollingFailuresTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "Paused" : "Between";
                         });

// A host that reaches one member of three acknowledges no write (the
// default ack is a quorum); reads go on from the member it reaches.
TEST_F(ReplicaSetVolumeTest, AMinorityAcknowledgesNoWrite) {
  StartSet();
  const std::string f = mnt_ / "rep/f";
  WriteWholeFile(f, "old");
  KillServer(1);
  KillServer(2);
  const int fd = open(f.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << strerror(errno);
  EXPECT_EQ(pwrite(fd, "new", 3, 0), -1);
  EXPECT_EQ(errno, EIO);
  close(fd);
  RestartServer(1);
  RestartServer(2);
  EXPECT_TRUE(WaitState("S2", "current"));
  EXPECT_TRUE(WaitState("S3", "current"));
  // Not acknowledged: either value, but the same on every member.
  const std::string now = ReadWholeFile(r1_ / "rep/f");
  EXPECT_TRUE(now == "old" || now == "new") << now;
  EXPECT_EQ(ReadWholeFile(r2_ / "rep/f"), now);
  EXPECT_EQ(ReadWholeFile(r3_ / "rep/f"), now);
}

// A member that hangs (SIGSTOP) rather than dies: with read=primary the
// reads that reach it fail over once the remote deadline (1 s here) ends,
// it leaves the set, and the others serve; with read=hedged a second member
// is asked once the first is late, so reads go on around it at once (the
// hedge counters show it). No read or write fails; once it runs again it
// is resynced and all three end equal.
class HungMemberTest : public ReplicaSetVolumeTest,
                       public ::testing::WithParamInterface<std::string> {};

TEST_P(HungMemberTest, ReadsGoAroundItAndItComesBack) {
  StartSet(",read=" + GetParam(), {"--remote-timeout-ms", "1000"});
  constexpr uint32_t kBlocks = 64;
  {
    std::string all;
    for (uint32_t b = 0; b < kBlocks; ++b) all += Block(b, 0);
    WriteWholeFile(mnt_ / "rep/data", all);
  }
  BlockLoad load(mnt_ / "rep/data", kBlocks, 1, 3,
                 std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ASSERT_EQ(kill(servers_[0]->pid(), SIGSTOP), 0);  // the primary
  // Reads go around it (a failover, or a hedge that won), and then go on:
  // 20 more while it is still stopped.
  const bool around = Eventually(
      [&] {
        const proto::CtlReplicaSet s = Set();
        return GetParam() == "hedged" ? s.hedge_wins() > 0 : s.failovers() > 0;
      },
      30);
  const int reads_while_hung = load.reads.load();
  const bool more =
      Eventually([&] { return load.reads.load() > reads_while_hung + 20; }, 30);
  ASSERT_EQ(kill(servers_[0]->pid(), SIGCONT), 0);
  EXPECT_TRUE(around) << Status();
  EXPECT_TRUE(more) << "reads stopped behind S1";
  EXPECT_TRUE(WaitState("S1", "current"));
  load.Stop();
  EXPECT_GT(load.writes.load(), 10);
  EXPECT_EQ(load.read_errors.load(), 0);
  EXPECT_EQ(load.write_errors.load(), 0);
  EXPECT_EQ(load.torn.load(), 0);
  EXPECT_EQ(load.older.load(), 0);
  const proto::CtlReplicaSet set = Set();
  if (GetParam() == "hedged") {
    EXPECT_GT(set.hedge_wins(), 0) << set.DebugString();
  } else {
    EXPECT_GT(set.failovers(), 0) << set.DebugString();
  }
  const std::string s1 = ReadWholeFile(r1_ / "rep/data");
  EXPECT_TRUE(ReadWholeFile(r2_ / "rep/data") == s1);
  EXPECT_TRUE(ReadWholeFile(r3_ / "rep/data") == s1);
}

INSTANTIATE_TEST_SUITE_P(Read, HungMemberTest,
                         ::testing::Values("primary", "hedged"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param;
                         });

// The trust issue's model-based exerciser (tools/exercise: writes, reads,
// shared mmap, truncates, fallocate, copy_file_range, SEEK_DATA/HOLE) on two
// replicated files, reads from any member, a member SIGKILLed a third of the
// way through and restarted at two thirds: every result matches the model,
// and once it is resynced every member holds exactly the files.
TEST_F(ReplicaSetVolumeTest, ExerciserMatchesTheModelWithAMemberKilledMidway) {
  StartSet(",read=random");
  ExerciseOptions eo;
  eo.seed = 2301;
  eo.ops = 3000;
  eo.shifts_may_be_refused = true;  // FUSE passes no collapse/insert
  auto restart = [&] { RestartServer(1); };
  eo.after_op = [&](uint64_t op) -> std::string {
    if (op == eo.ops / 3) KillServer(1);
    if (op == 2 * eo.ops / 3) restart();
    return "";
  };
  const ExerciseResult r = Exercise({mnt_ / "rep/a", mnt_ / "rep/b"}, eo);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(WaitState("S2", "current"));
  for (const char* f : {"rep/a", "rep/b"}) {
    const std::string want = ::sroute::testing::ReadAll(mnt_ / f);
    for (testing::TempDir* root : {&r1_, &r2_, &r3_}) {
      EXPECT_TRUE(::sroute::testing::ReadAll(*root / f) == want)
          << f << " differs on " << root->path();
    }
  }
}

// The trust issue's exerciser through a replicated pair of emulated flash
// devices (issue 24), small enough that GC runs all along: every page a
// write makes is a new physical page, and the writes make many times the
// devices' pages. The files read back as the model says, and both devices
// hold the same bytes.
TEST_F(ReplicaSetVolumeTest, ExerciserMatchesTheModelOnAFlashPairWithGc) {
  testing::TempDir f1, f2;
  for (auto* d : {&f1, &f2, &home_}) {
    ASSERT_EQ(mkdir((*d / "rep").c_str(), 0755), 0);
  }
  // The small preset on 8 blocks a die (512 pages of 4 KiB, half of them
  // spare) with fast timing: the test is about bytes, not time.
  const std::string model =
      ",preset=small,blocks_per_die=8,read_us=5,program_us=20,erase_us=100,"
      "buffer_us=1";
  Mount({"F1=flash:" + f1.path() + model, "F2=flash:" + f2.path() + model},
        kRules, {"--stage", "rs=replica_set:member=F1,member=F2,read=random"});
  ExerciseOptions eo;
  eo.seed = 2402;
  eo.ops = 4000;
  eo.max_size = 256 * 1024;  // two files: half of a device's logical pages
  eo.shifts_may_be_refused = true;
  const ExerciseResult r = Exercise({mnt_ / "rep/a", mnt_ / "rep/b"}, eo);
  ASSERT_TRUE(r.ok) << r.error;
  uint64_t writes = 0;
  for (const auto& [kind, n] : r.counts) {
    if (kind.find("write") != std::string::npos) writes += n;
  }
  EXPECT_GT(writes, 2 * 512u) << "too few writes to make GC run";
  for (const char* f : {"rep/a", "rep/b"}) {
    const std::string want = ::sroute::testing::ReadAll(mnt_ / f);
    EXPECT_TRUE(::sroute::testing::ReadAll(f1 / f) == want) << f << " on F1";
    EXPECT_TRUE(::sroute::testing::ReadAll(f2 / f) == want) << f << " on F2";
  }
}

// The one set of `gc status NAME --json` (an empty one if it is not one).
proto::CtlGcSet GcSetOf(const std::string& json) {
  const proto::CtlGcStatus status = testing::FromJson<proto::CtlGcStatus>(json);
  return status.sets_size() == 1 ? status.sets(0) : proto::CtlGcSet();
}

// Two storage servers keep their files on emulated flash devices whose GC
// waits for a grant (mode=coordinated); the volume replicates rep/ on them
// and the controller runs gc_redirect, which learns from the servers'
// gauges that the members are flash devices and sets the stage's GC
// coordination up. Under write pressure the devices collect in turn (two
// passes overlap only where one had to run), reads go around the member
// that collects, `sroutectl gc status` shows it; a server SIGKILLed
// mid-run and started again loses no acknowledged write (an acknowledged
// write is in the device's backing file: the kernel keeps it when the
// process dies), and resync makes both devices equal.
TEST_F(ReplicaSetVolumeTest, FlashMembersBehindServersCollectInTurn) {
  testing::TempDir db, f1, f2;
  testing::ServerProcess controller =
      StartController(db, "gc_redirect:mode=delay,poll_us=500");
  ASSERT_TRUE(controller.ok());
  ASSERT_EQ(mkdir((home_ / "rep").c_str(), 0755), 0);
  testing::TempDir* flash[] = {&f1, &f2};
  const char* names[] = {"S1", "S2"};
  auto server_args = [&](int i) {
    return std::vector<std::string>{
        "--endpoint",
        std::string("ssd=flash:") + flash[i]->path() +
            ",preset=small,mode=coordinated",
        "--rule",
        std::string("<*, *, //") + names[i] + "/*> -> <IO, //ssd/*>",
        "--controller",
        controller.address()};
  };
  int ports[2];
  ServerProcess* servers[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(mkdir((*flash[i] / "rep").c_str(), 0755), 0);
    servers[i] =
        StartServer(names[i], i == 0 ? r1_.path() : r2_.path(), server_args(i));
    ASSERT_TRUE(servers[i]->ok());
    ports[i] = servers[i]->port();
  }
  Mount({"S1=" + servers[0]->address(), "S2=" + servers[1]->address()}, kRules,
        {"--stage",
         "rs=replica_set:member=S1,member=S2,read=random,degrade=true,"
         "probe_ms=100,region_size=64K",
         "--controller", controller.address()});
  const std::string status =
      "--host unix:" + (ctl_ / "sock") + " gc status rs --json --last 256";
  bool set_up = false;
  for (int i = 0; i < 300 && !set_up; ++i) {
    auto [rc, out] = Ctl(status);
    set_up = rc == 0 && GcSetOf(out).mode() == "delay";
    if (!set_up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(set_up) << "gc_redirect never set the stage up: "
                      << Ctl(status).second;

  constexpr uint64_t kPages = 200;
  std::string model(kPages * kBlock, '\0');
  WriteWholeFile(mnt_ / "rep/f", model);
  const int fd = open((mnt_ / "rep/f").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::mt19937_64 rng(24);
  // Acknowledged writes only enter the model; one that fails is the
  // caller's to retry (none should while a member is up).
  auto write_some = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const uint64_t page = rng() % kPages;
      std::string block(kBlock, static_cast<char>('a' + rng() % 26));
      block[0] = static_cast<char>(i);
      ASSERT_EQ(pwrite(fd, block.data(), kBlock, page * kBlock),
                static_cast<ssize_t>(kBlock))
          << strerror(errno);
      model.replace(page * kBlock, kBlock, block);
      if (i % 8 == 0) {
        std::string back(kBlock, '\0');
        ASSERT_EQ(pread(fd, back.data(), kBlock, page * kBlock),
                  static_cast<ssize_t>(kBlock));
        ASSERT_TRUE(back == model.substr(page * kBlock, kBlock)) << page;
      }
    }
  };
  write_some(3000);
  auto [rc, out] = Ctl(status);
  ASSERT_EQ(rc, 0) << out;
  const proto::CtlGcSet gc = GcSetOf(out);
  const auto& passes = gc.timeline();
  ASSERT_GT(passes.size(), 2) << out;
  int soft = 0;
  for (int i = 0; i < passes.size(); ++i) {
    soft += passes[i].kind() == "soft" ? 1 : 0;
    for (int j = i + 1; j < passes.size(); ++j) {
      const proto::GcEvent& a = passes[i];
      const proto::GcEvent& b = passes[j];
      if (a.member() == b.member()) continue;
      const bool overlap = testing::PassesOverlap(a, b);
      EXPECT_TRUE(!overlap || testing::HadToCollect(a, b))
          << a.DebugString() << b.DebugString();
    }
  }
  EXPECT_GT(soft, 0) << out;
  auto [text_rc, text] =
      Ctl("--host unix:" + (ctl_ / "sock") + " gc status rs");
  EXPECT_EQ(text_rc, 0);
  EXPECT_NE(text.find("GC passes"), std::string::npos) << text;

  servers[1]->Kill();
  write_some(500);  // degraded: S1 alone
  servers[1] = StartServer(names[1], r2_.path(), server_args(1), ports[1]);
  ASSERT_TRUE(servers[1]->ok());
  write_some(300);
  close(fd);
  EXPECT_TRUE(WaitState("S2", "current"));
  EXPECT_TRUE(ReadWholeFile(mnt_ / "rep/f") == model);
  EXPECT_TRUE(ReadWholeFile(f1 / "rep/f") == model) << "S1's device";
  EXPECT_TRUE(ReadWholeFile(f2 / "rep/f") == model) << "S2's device";
}

// The wear_level app: a server's flash device split in two vSSDs, one
// holding a file that is overwritten (hot), the other a file written once
// (cold). Once the hot vSSD's mean erase count pulls away, the app copies
// each vSSD's data to the other while the writes go on, parks the flows,
// syncs, and moves the server's rules: every acknowledged write reads back
// through the volume, the file keeps its owner (a user) and mode, the rules
// name the new folders, the old copies are gone, and `sroutectl wear
// status` tells what was done.
TEST_F(ReplicaSetVolumeTest, WearLevelSwapsHotAndColdDataLive) {
  testing::TempDir db, flash;
  testing::ServerProcess controller =
      StartController(db, "wear_level:variance=0.5,cooldown=3600,rate=8M");
  ASSERT_TRUE(controller.ok());
  ServerProcess* server = StartServer(
      "S1", r1_.path(),
      {"--endpoint", "ssd=flash:" + flash.path() + ",preset=small,vssds=2",
       "--controller", controller.address()});
  ASSERT_TRUE(server->ok());
  ASSERT_EQ(mkdir((home_ / "wl").c_str(), 0755), 0);
  Mount({"S1=" + server->address()}, "<*, *, //home/wl/*> -> <IO, //S1/*>\n");
  const std::string at = "--controller " + controller.address() +
                         " --secret-file " + secret_ + " ";
  for (const char* rule : {"'<*, *, //S1/hot/*> -> <IO, //ssd.v0/hot/*>'",
                           "'<*, *, //S1/cold/*> -> <IO, //ssd.v1/cold/*>'"}) {
    int rc = 1;
    std::string out;
    for (int i = 0; i < 100 && rc != 0; ++i) {  // until S1 registered
      std::tie(rc, out) = Ctl(at + "rules add --host S1 " + rule);
      if (rc != 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_EQ(rc, 0) << out;
  }
  ASSERT_EQ(mkdir((mnt_ / "wl/hot").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((mnt_ / "wl/cold").c_str(), 0755), 0);
  std::string cold(100 * kBlock, '\0');
  for (size_t i = 0; i < cold.size(); ++i) cold[i] = static_cast<char>(i * 7);
  WriteWholeFile(mnt_ / "wl/cold/c", cold);
  constexpr uint64_t kPages = 128;
  std::string hot(kPages * kBlock, 'h');
  WriteWholeFile(mnt_ / "wl/hot/h", hot);
  ASSERT_TRUE(ReadWholeFile(flash / "v0/hot/h") == hot) << "on vSSD 0";
  // The files are a user's: the swap keeps who owns them and their mode.
  const testing::User owner = testing::Nobody();
  ASSERT_EQ(chown((mnt_ / "wl/hot/h").c_str(), owner.uid, owner.gid), 0);
  ASSERT_EQ(chmod((mnt_ / "wl/hot/h").c_str(), 0640), 0);

  const int fd = open((mnt_ / "wl/hot/h").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  std::mt19937_64 rng(31);
  bool swapped = false;
  std::string status;
  int after_swap = 0;
  // Overwrites go on before, during and after the swap; only acknowledged
  // ones enter the model.
  for (int i = 0; i < 60000 && after_swap < 300; ++i) {
    const uint64_t page = rng() % kPages;
    std::string block(kBlock, static_cast<char>('a' + rng() % 26));
    std::memcpy(block.data(), &i, sizeof(i));
    ASSERT_EQ(pwrite(fd, block.data(), kBlock, page * kBlock),
              static_cast<ssize_t>(kBlock))
        << strerror(errno);
    hot.replace(page * kBlock, kBlock, block);
    if (swapped) ++after_swap;
    if (!swapped && i % 200 == 0) {
      int rc = 0;
      std::tie(rc, status) = Ctl(at + "wear status --json");
      swapped =
          rc == 0 &&
          testing::FromJson<proto::CtlWearStatus>(status).status().starts_with(
              "swapped S1");
    }
  }
  close(fd);
  ASSERT_TRUE(swapped) << "no swap: " << status;
  EXPECT_TRUE(ReadWholeFile(mnt_ / "wl/hot/h") == hot);
  EXPECT_TRUE(ReadWholeFile(mnt_ / "wl/cold/c") == cold);

  // The rules name the new folders: hot data on vSSD 1, cold on vSSD 0.
  // Not a structured binding: clang 14 cannot capture one in a lambda.
  int rc = 0;
  std::string rules;
  std::tie(rc, rules) = Ctl(at + "rules ls --host S1");
  ASSERT_EQ(rc, 0) << rules;
  const size_t hot_rule = rules.find("//ssd.v1/.sroute-wl-");
  const size_t cold_rule = rules.find("//ssd.v0/.sroute-wl-");
  ASSERT_NE(hot_rule, std::string::npos) << rules;
  ASSERT_NE(cold_rule, std::string::npos) << rules;
  auto folder_of = [&](size_t from) {
    const size_t b = rules.find(".sroute-wl-", from);
    return rules.substr(b, rules.find('/', b) - b);
  };
  EXPECT_TRUE(ReadWholeFile(flash / ("v1/" + folder_of(hot_rule) + "/hot/h")) ==
              hot);
  EXPECT_TRUE(ReadWholeFile(
                  flash / ("v0/" + folder_of(cold_rule) + "/cold/c")) == cold);
  struct stat st {};
  ASSERT_EQ(stat((mnt_ / "wl/hot/h").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, owner.uid);
  EXPECT_EQ(st.st_gid, owner.gid);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_FALSE(std::filesystem::exists(flash / "v0/hot")) << "old copy gone";
  EXPECT_FALSE(std::filesystem::exists(flash / "v1/cold")) << "old copy gone";
  auto [text_rc, text] = Ctl(at + "wear status");
  EXPECT_EQ(text_rc, 0) << text;
  EXPECT_NE(text.find("swapped S1 ssd.v0 <-> ssd.v1"), std::string::npos)
      << text;
  EXPECT_NE(text.find("S1: variance of the mean erase counts"),
            std::string::npos)
      << text;
}

// The replica_control app: a read-only flow reads from every member; the
// first write of each burst waits while the app sends the flow's reads back
// to the primary, and after a second without writes they spread again.
// Readers check version stamps: a read that begins after some read returned
// version v of a block never returns an older one (a reader that saw a
// write's bytes on one member must not find a member that has not applied it
// yet), and no read or write fails.
TEST_F(ReplicaSetVolumeTest, ControlSpreadsReadOnlyFlowsAndReadsNeverGoBack) {
  testing::TempDir db;
  testing::ServerProcess controller = StartController(
      db, "replica_control:stage=rs,flows=//home/rep/*,idle=1,spread=random");
  ASSERT_TRUE(controller.ok());
  StartSet("", {"--controller", controller.address()});
  constexpr uint32_t kBlocks = 64;
  {
    std::string all;
    for (uint32_t b = 0; b < kBlocks; ++b) all += Block(b, 0);
    WriteWholeFile(mnt_ / "rep/data", all);
  }
  const std::string path = mnt_ / "rep/data";
  std::vector<std::atomic<uint32_t>> seen(kBlocks);
  std::atomic<bool> stop{false};
  std::atomic<int> read_errors{0}, torn{0}, older{0}, reads{0};
  std::atomic<int> last_read_error{0};  // errno, or minus a short count
  std::vector<std::thread> readers;
  JoinOnExit join_on_exit{stop, readers};
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      const int fd = open(path.c_str(), O_RDONLY);
      std::mt19937 rng(r);
      std::string buf(kBlock, '\0');
      while (!stop.load()) {
        const uint32_t b = rng() % kBlocks;
        const uint32_t before = seen[b].load();
        const ssize_t got =
            pread(fd, buf.data(), kBlock, static_cast<off_t>(b) * kBlock);
        if (got != static_cast<ssize_t>(kBlock)) {
          last_read_error = got < 0 ? errno : -static_cast<int>(got);
          ++read_errors;
          continue;
        }
        ++reads;
        const int64_t v = VersionOf(buf, b);
        if (v < 0) {
          ++torn;
          continue;
        }
        if (v < before) ++older;
        uint32_t cur = seen[b].load();
        while (cur < v &&
               !seen[b].compare_exchange_weak(cur, static_cast<uint32_t>(v))) {
        }
      }
      close(fd);
    });
  }
  // Reads spread: the members other than the primary serve some.
  auto spread = [&] {
    const int64_t s2 = ReadsOf("S2"), s3 = ReadsOf("S3");
    for (int i = 0; i < 300; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (ReadsOf("S2") > s2 + 20 && ReadsOf("S3") > s3 + 20) return true;
    }
    return false;
  };
  int write_errors = 0;
  for (uint32_t version = 1; version <= 3; ++version) {
    ASSERT_TRUE(spread()) << "reads never spread before write burst " << version
                          << " (reads " << reads.load() << ", failed "
                          << read_errors.load() << ", last "
                          << last_read_error.load() << "): " << Status();
    const int fd = open(path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << strerror(errno);
    for (uint32_t b = 0; b < kBlocks; ++b) {
      const std::string data = Block(b, version);
      if (pwrite(fd, data.data(), kBlock, static_cast<off_t>(b) * kBlock) !=
          static_cast<ssize_t>(kBlock)) {
        ++write_errors;
      }
    }
    close(fd);
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(write_errors, 0);
  EXPECT_GT(reads.load(), 100);
  EXPECT_EQ(read_errors.load(), 0) << "last: " << last_read_error.load();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(older.load(), 0);
  const std::string s1 = ReadWholeFile(r1_ / "rep/data");
  ASSERT_EQ(s1.size(), kBlocks * kBlock);
  for (uint32_t b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(VersionOf(s1.substr(b * kBlock, kBlock), b), 3) << b;
  }
  EXPECT_TRUE(ReadWholeFile(r2_ / "rep/data") == s1);
  EXPECT_TRUE(ReadWholeFile(r3_ / "rep/data") == s1);
}

// The app across hosts: fuse-test reads the flow (spread), fuse-test2 writes
// it. A write on the second host first sets the first host's reads back to
// the primary: no reader there ever sees a block older than one the writer
// had been told was written before the read began, nor older than one it
// saw itself, and its reads spread again between the bursts.
TEST_F(ReplicaSetVolumeTest,
       ControlAcrossHostsKeepsAReaderOnAnotherHostCurrent) {
  testing::TempDir db;
  testing::ServerProcess controller = StartController(
      db, "replica_control:stage=rs,flows=//home/rep/*,idle=1,spread=random");
  ASSERT_TRUE(controller.ok());
  StartSet("", {"--controller", controller.address()});
  MountSecondHost();
  constexpr uint32_t kBlocks = 64;
  {
    std::string all;
    for (uint32_t b = 0; b < kBlocks; ++b) all += Block(b, 0);
    WriteWholeFile(mnt2_ / "rep/data", all);
  }
  std::vector<std::atomic<uint32_t>> acked(kBlocks), seen(kBlocks);
  std::atomic<bool> stop{false};
  std::atomic<int> read_errors{0}, torn{0}, older{0}, reads{0};
  std::vector<std::thread> readers;
  JoinOnExit join_on_exit{stop, readers};
  const std::string on_first = mnt_ / "rep/data";
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      const int fd = open(on_first.c_str(), O_RDONLY);
      std::mt19937 rng(r);
      std::string buf(kBlock, '\0');
      while (!stop.load()) {
        const uint32_t b = rng() % kBlocks;
        const uint32_t before = std::max(acked[b].load(), seen[b].load());
        if (pread(fd, buf.data(), kBlock, static_cast<off_t>(b) * kBlock) !=
            static_cast<ssize_t>(kBlock)) {
          ++read_errors;
          continue;
        }
        ++reads;
        const int64_t v = VersionOf(buf, b);
        if (v < 0) {
          ++torn;
          continue;
        }
        if (v < before) ++older;
        uint32_t cur = seen[b].load();
        while (cur < v &&
               !seen[b].compare_exchange_weak(cur, static_cast<uint32_t>(v))) {
        }
      }
      close(fd);
    });
  }
  auto spread = [&] {
    const int64_t s2 = ReadsOf("S2"), s3 = ReadsOf("S3");
    for (int i = 0; i < 300; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (ReadsOf("S2") > s2 + 20 && ReadsOf("S3") > s3 + 20) return true;
    }
    return false;
  };
  int write_errors = 0;
  const std::string on_second = mnt2_ / "rep/data";
  for (uint32_t version = 1; version <= 3; ++version) {
    ASSERT_TRUE(spread()) << "the first host's reads never spread before "
                          << "burst " << version << ": " << Status();
    const int fd = open(on_second.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << strerror(errno);
    for (uint32_t b = 0; b < kBlocks; ++b) {
      const std::string data = Block(b, version);
      if (pwrite(fd, data.data(), kBlock, static_cast<off_t>(b) * kBlock) ==
          static_cast<ssize_t>(kBlock)) {
        acked[b].store(version);
      } else {
        ++write_errors;
      }
    }
    close(fd);
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(write_errors, 0);
  EXPECT_GT(reads.load(), 100);
  EXPECT_EQ(read_errors.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(older.load(), 0);
  const std::string s1 = ReadWholeFile(r1_ / "rep/data");
  ASSERT_EQ(s1.size(), kBlocks * kBlock);
  for (uint32_t b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(VersionOf(s1.substr(b * kBlock, kBlock), b), 3) << b;
  }
  ExpectMembersIdentical();
}

// Users as they are on a replicated folder: every POSIX scenario, run by an
// ordinary user with supplementary groups of its own, prints what it prints
// on a plain directory (each change reaches three servers as that user), and
// the scenarios of several users on one tree do too; the members end equal.
TEST_F(ReplicaSetVolumeTest, UsersSeeWhatAPlainDirectoryShows) {
  StartSet();
  const testing::User user = testing::Grouped();
  auto user_dir = [&](const std::string& parent, const std::string& name) {
    const std::string d = parent + "/" + name;
    EXPECT_EQ(mkdir(d.c_str(), 0755), 0) << d << ": " << strerror(errno);
    EXPECT_EQ(chown(d.c_str(), user.uid, user.gid), 0) << strerror(errno);
    return d;
  };
  for (const testing::Scenario& s : testing::PosixScenarios()) {
    // 20 000 creates and unlinks on three servers (too slow for every run):
    // listings come from the primary, as every scenario's list() shows.
    if (s.name == "readdir_large") continue;
    testing::TempDir plain;
    chmod(plain.path().c_str(), 0755);
    const std::string on_plain = user_dir(plain.path(), s.name);
    const std::string on_mount = user_dir(mnt_ / "rep", s.name);
    const std::string expected =
        testing::RunAs(user, [&] { return s.run(on_plain); });
    EXPECT_EQ(testing::RunAs(user, [&] { return s.run(on_mount); }), expected)
        << s.name;
    EXPECT_EQ(expected.find("<child failed"), std::string::npos) << expected;
  }
  for (const testing::Scenario& s : testing::IdentityScenarios()) {
    testing::TempDir plain;
    chmod(plain.path().c_str(), 0755);
    const std::string on_plain = plain / s.name;
    const std::string on_mount = mnt_ / ("rep/" + s.name);
    ASSERT_EQ(mkdir(on_plain.c_str(), 0755), 0);
    ASSERT_EQ(mkdir(on_mount.c_str(), 0755), 0);
    const std::string expected = s.run(on_plain);
    EXPECT_EQ(s.run(on_mount), expected) << s.name;
  }
  ExpectMembersIdentical();
}

// A name moves into or out of the replicated folder only by a copy: rename
// and link across its edge fail with EXDEV before anything changed (mv then
// copies), as across endpoints; a name moved out on the members alone would
// be lost to the volume, one moved in would reach no member.
TEST_F(ReplicaSetVolumeTest, NamesCrossTheSetsEdgeOnlyByCopy) {
  StartSet();
  WriteWholeFile(mnt_ / "rep/a", "in the set");
  WriteWholeFile(mnt_ / "outside", "on the home");
  const std::string in = mnt_ / "rep/a", out = mnt_ / "outside";
  EXPECT_EQ(rename(in.c_str(), (mnt_ / "out2").c_str()), -1);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_EQ(rename(out.c_str(), (mnt_ / "rep/b").c_str()), -1);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_EQ(link(in.c_str(), (mnt_ / "l1").c_str()), -1);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_EQ(link(out.c_str(), (mnt_ / "rep/l2").c_str()), -1);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_EQ(ReadWholeFile(in), "in the set");
  EXPECT_EQ(ReadWholeFile(r2_ / "rep/a"), "in the set");
  EXPECT_EQ(ReadWholeFile(out), "on the home");
  auto [rc, text] =
      testing::RunCommand("mv '" + in + "' '" + (mnt_ / "out3") + "' && mv '" +
                          out + "' '" + (mnt_ / "rep/c") + "'");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_EQ(ReadWholeFile(mnt_ / "out3"), "in the set");
  EXPECT_EQ(ReadWholeFile(home_ / "out3"), "in the set");
  EXPECT_EQ(ReadWholeFile(mnt_ / "rep/c"), "on the home");
  for (auto* r : {&r1_, &r2_, &r3_}) {
    EXPECT_EQ(ReadWholeFile(*r / "rep/c"), "on the home");
    EXPECT_FALSE(std::filesystem::exists(*r / "rep/a"));
  }
  ASSERT_EQ(rename((mnt_ / "rep/c").c_str(), (mnt_ / "rep/d").c_str()), 0);
  EXPECT_EQ(ReadWholeFile(r3_ / "rep/d"), "on the home");
  ExpectMembersIdentical();
}

// SQLite, run by an ordinary user, on the replicated folder (rollback
// journal and WAL): a member is SIGKILLed midway and brought back while
// transactions go on; none fails, every committed row is there, the
// database is whole, and once resynced the three copies are identical.
TEST_F(ReplicaSetVolumeTest, SqliteAsAUserSurvivesAKilledMember) {
  StartSet();
  const testing::User user = testing::Nobody();
  const std::string dir = mnt_ / "rep/db";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chown(dir.c_str(), user.uid, user.gid), 0);
  testing::TempDir flags;  // the user sees the stop flags
  ASSERT_EQ(chmod(flags.path().c_str(), 0755), 0);
  for (const std::string mode : {"DELETE", "WAL"}) {
    const std::string path = dir + "/" + mode + ".db";
    const std::string stop_file = flags / ("stop-" + mode);
    std::string result;
    std::thread app([&] {
      result = SqliteSessionAs(user, path, mode, [&](int) {
        return access(stop_file.c_str(), F_OK) != 0;
      });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    KillServer(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    RestartServer(1);
    EXPECT_TRUE(WaitState("S2", "current"));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    WriteWholeFile(stop_file, "");
    app.join();
    EXPECT_EQ(result, "ok") << mode;
  }
  EXPECT_TRUE(WaitState("S2", "current"));
  ExpectMembersIdentical();
}

// placement=anywhere (issue 49): SQLite (rollback journal and WAL) and git
// as ordinary users on a set that keeps each 4 KiB region on two of its
// three members, the write-mode window moving under them (as the steering
// app moves it, live). Every transaction commits and the databases check
// whole; git fsck finds the repository whole; and every 4 KiB block of
// every file reads back through the volume as it is on at least two
// members (its copies).
TEST_F(ReplicaSetVolumeTest, SqliteAndGitAsUsersOnASegregatedSet) {
  StartSet(
      ",region_size=4K,placement=anywhere,copies=2,write_member=S1,"
      "write_member=S2");
  const testing::User user = testing::Grouped();
  const std::string dir = mnt_ / "rep/app";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chown(dir.c_str(), user.uid, user.gid), 0);
  const std::string host = "--host unix:" + (ctl_ / "sock");
  std::atomic<bool> done{false};
  std::atomic<int> moves{0};
  std::thread window([&] {
    const char* windows[] = {"write_member=S2,write_member=S3",
                             "write_member=S3,write_member=S1",
                             "write_member=S1,write_member=S2"};
    for (int i = 0; !done.load(); ++i) {
      auto [rc, out] = Ctl(host + " stages set rs " + windows[i % 3]);
      EXPECT_EQ(rc, 0) << out;
      ++moves;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
  });
  for (const std::string mode : {"DELETE", "WAL"}) {
    const std::string path = dir + "/" + mode + ".db";
    EXPECT_EQ(
        SqliteSessionAs(user, path, mode, [](int rows) { return rows < 300; }),
        "ok")
        << mode;
  }
  std::string out = GitAs(
      user, dir,
      "git init -q repo && cd repo && for i in $(seq 1 30); do "
      "seq 1 $((i * 80)) > f$i; done && git add -A && git commit -qm one && "
      "for i in $(seq 1 30); do echo x >> f$i; done && git commit -qam two "
      "&& git gc -q && git fsck --full --strict && git log --format=%s");
  EXPECT_TRUE(GitOk(out)) << out;
  EXPECT_NE(out.find("two\none\n"), std::string::npos) << out;
  done = true;
  window.join();
  EXPECT_GE(moves.load(), 2);
  auto [rc, stages] = Ctl(host + " stages ls");
  ASSERT_EQ(rc, 0) << stages;
  EXPECT_NE(stages.find("segregated_writes"), std::string::npos) << stages;
  EXPECT_EQ(stages.find("segregated_writes 0 "), std::string::npos) << stages;
  // Each block of each file: on two members at least, as the volume reads
  // it.
  testing::TempDir* roots[] = {&r1_, &r2_, &r3_};
  int files = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(dir);
       it != std::filesystem::recursive_directory_iterator(); ++it) {
    if (!it->is_regular_file()) continue;
    ++files;
    const std::string rel =
        std::filesystem::relative(it->path(), mnt_.path()).string();
    const std::string seen = ReadWholeFile(it->path().string());
    std::string copies[3];
    for (int m = 0; m < 3; ++m) copies[m] = ReadWholeFile(*roots[m] / rel);
    for (size_t off = 0; off < seen.size(); off += 4096) {
      const std::string block = seen.substr(off, 4096);
      int holders = 0;
      for (const std::string& c : copies) {
        holders += c.size() >= off + block.size() &&
                   c.compare(off, block.size(), block) == 0;
      }
      ASSERT_GE(holders, 2) << rel << " block " << off / 4096;
    }
  }
  EXPECT_GT(files, 10);
}

// git, run by an ordinary user, on the replicated folder: a repository is
// made and committed to, a member is SIGKILLed between commits and brought
// back; git fsck finds the repository whole, the history has every commit,
// and the members end identical.
TEST_F(ReplicaSetVolumeTest, GitAsAUserSurvivesAKilledMember) {
  StartSet();
  const testing::User user = testing::Grouped();
  const std::string dir = mnt_ / "rep/git";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chown(dir.c_str(), user.uid, user.gid), 0);
  auto git = [&](const std::string& script) {
    return GitAs(user, dir, script);
  };
  auto ok = GitOk;
  std::string out = git(
      "git init -q repo && cd repo && for i in $(seq 1 40); do "
      "mkdir -p d$((i % 5)) && seq 1 $((i * 50)) > d$((i % 5))/f$i; done && "
      "git add -A && git commit -qm one");
  ASSERT_TRUE(ok(out)) << out;
  KillServer(2);
  out = git(
      "cd repo && for i in $(seq 1 40); do echo change >> d$((i % 5))/f$i; "
      "done && git mv d1 moved && git rm -qf d2/f2 && git commit -qam two && "
      "git gc -q");
  ASSERT_TRUE(ok(out)) << out;
  RestartServer(2);
  EXPECT_TRUE(WaitState("S3", "current"));
  out = git("cd repo && git commit -q --allow-empty -m three");
  ASSERT_TRUE(ok(out)) << out;
  out = git("cd repo && git fsck --full --strict && git log --format=%s");
  ASSERT_TRUE(ok(out)) << out;
  EXPECT_NE(out.find("three\ntwo\none\n"), std::string::npos) << out;
  out = git("cd repo && git status --porcelain && cat moved/f1 | tail -1");
  EXPECT_EQ(out, "change\n");
  ExpectMembersIdentical();
}

// Real programs as ordinary users on a replicated pair of emulated flash
// devices whose GC the replica set coordinates (gc=delay: the devices wait
// for its grants): SQLite (rollback journal and WAL) and git, every
// transaction and commit is there, fsck and integrity_check find them
// whole. Then the volume fills up: the write that finds both devices full
// fails with ENOSPC and the set stays whole (a full device is not a failed
// one when no member could take the write), and takes writes again once a
// file is gone. The set granted GC passes, and both devices hold the same
// bytes.
TEST_F(ReplicaSetVolumeTest, SqliteAndGitAsUsersOnAFlashPairWithCoordinatedGc) {
  testing::TempDir f1, f2;
  // Ordinary users reach rep/ on the volume and on both devices (the
  // endpoints act as the caller).
  for (auto* d : {&f1, &f2, &home_}) {
    ASSERT_EQ(chmod(d->path().c_str(), 0755), 0);
    ASSERT_EQ(mkdir((*d / "rep").c_str(), 0755), 0);
  }
  // 32 MiB devices (half spare) with fast timing: about bytes, not time.
  const std::string model =
      ",preset=small,blocks_per_die=128,mode=coordinated,read_us=5,"
      "program_us=20,erase_us=100,buffer_us=1";
  Mount({"F1=flash:" + f1.path() + model, "F2=flash:" + f2.path() + model},
        kRules,
        {"--stage",
         "rs=replica_set:member=F1,member=F2,read=random,gc=delay,"
         "gc_poll_us=500"});
  const testing::User nobody = testing::Nobody();
  const testing::User grouped = testing::Grouped();
  const std::string db_dir = mnt_ / "rep/db", git_dir = mnt_ / "rep/git";
  ASSERT_EQ(mkdir(db_dir.c_str(), 0755), 0);
  ASSERT_EQ(chown(db_dir.c_str(), nobody.uid, nobody.gid), 0);
  ASSERT_EQ(mkdir(git_dir.c_str(), 0755), 0);
  ASSERT_EQ(chown(git_dir.c_str(), grouped.uid, grouped.gid), 0);
  for (const std::string mode : {"DELETE", "WAL"}) {
    EXPECT_EQ(SqliteSessionAs(nobody, db_dir + "/" + mode + ".db", mode,
                              [](int rows) { return rows < 800; }),
              "ok")
        << mode;
  }
  std::string out = GitAs(
      grouped, git_dir,
      "git init -q repo && cd repo && for i in $(seq 1 60); do "
      "mkdir -p d$((i % 6)) && seq 1 $((i * 80)) > d$((i % 6))/f$i; done && "
      "git add -A && git commit -qm one && "
      "for i in $(seq 1 60); do echo change >> d$((i % 6))/f$i; done && "
      "git commit -qam two && git gc -q && "
      "git fsck --full --strict && git log --format=%s");
  ASSERT_TRUE(GitOk(out)) << out;
  EXPECT_NE(out.find("two\none\n"), std::string::npos) << out;

  const std::string fill = mnt_ / "rep/fill";
  const int fd = open(fill.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  const std::string chunk(256 << 10, 'f');
  int err = 0;
  for (int i = 0; i < 200 && err == 0; ++i) {  // 50 MiB: more than there is
    if (write(fd, chunk.data(), chunk.size()) < 0) err = errno;
  }
  close(fd);
  EXPECT_EQ(err, ENOSPC) << strerror(err);
  EXPECT_EQ(StateOf("F1"), "current");
  EXPECT_EQ(StateOf("F2"), "current");
  ASSERT_EQ(unlink(fill.c_str()), 0) << strerror(errno);
  WriteWholeFile(mnt_ / "rep/after", chunk);
  EXPECT_TRUE(ReadWholeFile(mnt_ / "rep/after") == chunk);

  auto [rc, status] =
      Ctl("--host unix:" + (ctl_ / "sock") + " gc status rs --json");
  ASSERT_EQ(rc, 0) << status;
  const proto::CtlGcSet gc = GcSetOf(status);
  EXPECT_EQ(gc.mode(), "delay") << status;
  EXPECT_GT(gc.granted_soft() + gc.granted_regular(), 0)
      << "the devices never collected: " << status;
  for (const char* f : {"rep/db/DELETE.db", "rep/db/WAL.db",
                        "rep/git/repo/.git/index", "rep/after"}) {
    const std::string want = ::sroute::testing::ReadAll(mnt_ / f);
    EXPECT_FALSE(want.empty()) << f;
    EXPECT_TRUE(::sroute::testing::ReadAll(f1 / f) == want) << f << " on F1";
    EXPECT_TRUE(::sroute::testing::ReadAll(f2 / f) == want) << f << " on F2";
  }
}

// sroutectl replicas: ls and status show the set; set-primary and rm/add
// change it; bad requests are refused with a reason.
TEST_F(ReplicaSetVolumeTest, SroutectlShowsAndChangesTheSet) {
  StartSet();
  const std::string host = "--host unix:" + (ctl_ / "sock");
  auto [rc, out] = Ctl(host + " replicas ls");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("S1* S2 S3"), std::string::npos) << out;
  EXPECT_NE(out.find("quorum"), std::string::npos) << out;
  std::tie(rc, out) = Ctl(host + " replicas status rs");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("current"), std::string::npos) << out;
  std::tie(rc, out) = Ctl(host + " replicas set-primary rs S2");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("S2*"), std::string::npos) << out;
  std::tie(rc, out) = Ctl(host + " replicas set-primary rs S9");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("S9 is not a member of rs"), std::string::npos) << out;
  std::tie(rc, out) = Ctl(host + " replicas rm rs S2");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("is the primary"), std::string::npos) << out;
  WriteWholeFile(mnt_ / "rep/f", "kept");
  std::tie(rc, out) = Ctl(host + " replicas rm rs S3");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("S3"), std::string::npos) << out;
  WriteWholeFile(mnt_ / "rep/g", "while S3 was no member");
  std::tie(rc, out) = Ctl(host + " replicas add rs S3");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(WaitState("S3", "current"));
  EXPECT_EQ(ReadWholeFile(r3_ / "rep/g"), "while S3 was no member");
  std::tie(rc, out) = Ctl(host + " replicas status nope");
  EXPECT_EQ(rc, 1);
}

}  // namespace
}  // namespace sroute

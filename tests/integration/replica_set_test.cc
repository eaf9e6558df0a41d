// Replica sets for real (issue 23): a FUSE volume whose rep/ folder is kept
// on three storage servers by a replica_set stage, servers killed and
// restarted under load, resync, and sroutectl replicas.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/server_fixture.h"
#include "tools/exercise/exerciser.h"

namespace sroute {
namespace {

using ::sroute::testing::Exercise;
using ::sroute::testing::ExerciseOptions;
using ::sroute::testing::ExerciseResult;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::ServerProcess;
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
    Mount({"S1=" + servers_[0]->address(), "S2=" + servers_[1]->address(),
           "S3=" + servers_[2]->address()},
          "<*, *, //home/rep/*> -> <IO, stage:rs>\n", [&] {
            std::vector<std::string> args = {
                "--stage",
                "rs=replica_set:member=S1,member=S2,member=S3,probe_ms=100,"
                "region_size=64K" +
                    options};
            args.insert(args.end(), extra.begin(), extra.end());
            return args;
          }());
  }
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
  // `member`'s state in the status ("" if it is not listed).
  std::string StateOf(const std::string& member) {
    const std::string st = Status();
    const size_t at = st.find("\"name\": \"" + member + "\"");
    const std::string key = "\"state\": \"";
    const size_t s = at == std::string::npos ? at : st.find(key, at);
    if (s == std::string::npos) return "";
    const size_t b = s + key.size();
    return st.substr(b, st.find('"', b) - b);
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
  // Reads member `member` has served.
  int64_t ReadsOf(const std::string& member) {
    const std::string st = Status();
    const size_t at = st.find("\"name\": \"" + member + "\"");
    const std::string key = "\"reads\": ";
    const size_t s = at == std::string::npos ? at : st.find(key, at);
    return s == std::string::npos ? -1 : atoll(st.c_str() + s + key.size());
  }
  int ports_[3] = {0, 0, 0};
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
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_EQ(StateOf(victim_name), "out");
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
  const std::string status = Status();
  EXPECT_NE(status.find("\"resync_bytes\": "), std::string::npos) << status;
  EXPECT_EQ(status.find("\"resync_bytes\": 0,"), std::string::npos) << status;
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
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  const int reads_while_hung = load.reads.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const int reads_later = load.reads.load();
  ASSERT_EQ(kill(servers_[0]->pid(), SIGCONT), 0);
  EXPECT_TRUE(WaitState("S1", "current"));
  load.Stop();
  EXPECT_GT(reads_later, reads_while_hung) << "reads stopped behind S1";
  EXPECT_GT(load.writes.load(), 10);
  EXPECT_EQ(load.read_errors.load(), 0);
  EXPECT_EQ(load.write_errors.load(), 0);
  EXPECT_EQ(load.torn.load(), 0);
  EXPECT_EQ(load.older.load(), 0);
  const std::string status = Status();
  if (GetParam() == "hedged") {
    EXPECT_EQ(status.find("\"hedge_wins\": 0,"), std::string::npos) << status;
  } else {
    EXPECT_EQ(status.find("\"failovers\": 0,"), std::string::npos) << status;
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

// The replica_control app: a read-only flow reads from every member; the
// first write of each burst waits while the app sends the flow's reads back
// to the primary, and after a second without writes they spread again.
// Readers check version stamps: a read that begins after some read returned
// version v of a block never returns an older one (a reader that saw a
// write's bytes on one member must not find a member that has not applied it
// yet), and no read or write fails.
TEST_F(ReplicaSetVolumeTest, ControlSpreadsReadOnlyFlowsAndReadsNeverGoBack) {
  testing::TempDir db;
  testing::ServerProcess controller(
      SROUTE_CONTROLLER_BINARY,
      {"--db", db / "db", "--secret-file", secret_, "--listen", "127.0.0.1:0",
       "--stats-interval-ms", "200", "--app",
       "replica_control:stage=rs,flows=//home/rep/*,idle=1,spread=random"});
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

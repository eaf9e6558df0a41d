// Replica sets for real (issue 23): a FUSE volume whose rep/ folder is kept
// on three storage servers by a replica_set stage, servers killed and
// restarted under load, resync, and sroutectl replicas.
#include <fcntl.h>
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

namespace sroute {
namespace {

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

class ReplicaSetVolumeTest : public ServerTest {
 protected:
  // Three servers and a volume with rep/* through stage rs on them.
  void StartSet(const std::string& options = "") {
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
          "<*, *, //home/rep/*> -> <IO, stage:rs>\n",
          {"--stage",
           "rs=replica_set:member=S1,member=S2,member=S3,probe_ms=100,"
           "region_size=64K" +
               options});
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
  std::vector<std::atomic<uint32_t>> acked(kBlocks);
  std::atomic<bool> stop{false};
  std::atomic<int> write_errors{0}, read_errors{0}, torn{0}, older{0};
  std::atomic<int> reads{0}, writes{0};
  std::vector<std::thread> threads;
  const std::string path = mnt_ / "rep/data";
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      const int fd = open(path.c_str(), O_WRONLY);
      std::mt19937 rng(w);
      while (!stop.load()) {
        const uint32_t b = (rng() % (kBlocks / 4)) * 4 + w;  // its own blocks
        const uint32_t v = acked[b].load() + 1;
        const std::string data = Block(b, v);
        if (pwrite(fd, data.data(), kBlock, static_cast<off_t>(b) * kBlock) ==
            static_cast<ssize_t>(kBlock)) {
          acked[b].store(v);
          ++writes;
        } else {
          ++write_errors;
        }
      }
      close(fd);
    });
  }
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      const int fd = open(path.c_str(), O_RDONLY);
      std::mt19937 rng(100 + r);
      std::string buf(kBlock, '\0');
      while (!stop.load()) {
        const uint32_t b = rng() % kBlocks;
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
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_GT(writes.load(), 100);
  EXPECT_GT(reads.load(), 100);
  EXPECT_EQ(write_errors.load(), 0);
  EXPECT_EQ(read_errors.load(), 0);
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(older.load(), 0);
  const std::string s1 = ReadWholeFile(r1_ / "rep/data");
  ASSERT_EQ(s1.size(), kBlocks * kBlock);
  for (uint32_t b = 0; b < kBlocks; ++b) {
    ASSERT_EQ(VersionOf(s1.substr(b * kBlock, kBlock), b),
              static_cast<int64_t>(acked[b].load()))
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

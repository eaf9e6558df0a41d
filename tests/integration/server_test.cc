// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: independent cases on one fixture (volumes over server
// processes), which each file of a split would repeat.
// sroute-server for real: FUSE volumes whose files live on storage servers
// started as separate processes on 127.0.0.1, server-side rules, failures
// (killed, stopped and full servers, wrong secrets, bad frames, escaping
// paths) and delegate-rule records.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "embed/embedded_host.h"
#include "endpoints/remote_endpoint.h"
#include "gtest/gtest.h"
#include "proto/cli_json.pb.h"
#include "rpc/channel.h"
#include "rpc/io_threads.h"
#include "sswitch/trace.h"
#include "tests/integration/posix_scenarios.h"
#include "tests/integration/server_fixture.h"
#include "tests/util/ctl_json.h"
#include "tests/util/delay_proxy.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/process_threads.h"
#include "tests/util/run_as.h"
#include "tests/util/run_command.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::DelayProxy;
using ::sroute::testing::Eventually;
using ::sroute::testing::FromJson;
using ::sroute::testing::FromJsonLine;
using ::sroute::testing::MountedVolume;
using ::sroute::testing::Nobody;
using ::sroute::testing::OutputLines;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunAs;
using ::sroute::testing::RunCommand;
using ::sroute::testing::ServerProcess;
using ::sroute::testing::StartCommand;
using ::sroute::testing::TempDir;
using ::sroute::testing::Throughout;
using ::sroute::testing::WaitCommand;
using ::sroute::testing::WriteSecretFile;
using ::sroute::testing::WriteWholeFile;

// The stages of one host's `stages ls --json`.
google::protobuf::RepeatedPtrField<proto::StageStats> StagesOf(
    const std::string& out) {
  const proto::CtlStages stages = FromJson<proto::CtlStages>(out);
  EXPECT_EQ(stages.hosts_size(), 1) << out;
  return stages.hosts_size() == 1
             ? stages.hosts(0).stages()
             : google::protobuf::RepeatedPtrField<proto::StageStats>();
}

std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// Writes `data` at `offset` of `path`; returns errno (0 when all was
// written).
int PwriteAll(const std::string& path, const std::string& data, off_t offset) {
  const int fd = open(path.c_str(), O_WRONLY);
  if (fd < 0) return errno;
  const ssize_t n = pwrite(fd, data.data(), data.size(), offset);
  const int err = n < 0 ? errno : 0;
  close(fd);
  if (err != 0) return err;
  return n == static_cast<ssize_t>(data.size()) ? 0 : EIO;
}

TEST_F(ServerTest, EndpointRangeScatterAndServerSideForwarding) {
  ServerProcess* s1 = StartServer("S1", r1_.path());
  ServerProcess* s2 = StartServer("S2", r2_.path());
  // S3 forwards whatever arrives for fwd/ to S1 (a server-side rule).
  ServerProcess* s3 =
      StartServer("S3", r3_.path(),
                  {"--endpoint", "S1=" + s1->address(), "--rule",
                   "<*, *, //S3/fwd/*> -> <IO, //S1/fwd/*>"});
  WriteWholeFile(home_ / "ranged.dat", "");
  WriteWholeFile(r2_ / "ranged.dat", "");
  WriteWholeFile(home_ / "scatter.dat", "");
  WriteWholeFile(r1_ / "scatter.dat", "");
  WriteWholeFile(r2_ / "scatter.dat", "");
  Mount({"S1=" + s1->address(), "S2=" + s2->address(), "S3=" + s3->address()},
        "<*, *, //home/remote.dat> -> <IO, //S1/remote.dat>\n"
        "<*, r|w, //home/ranged.dat[4K:8K]> -> <IO, //S2/ranged.dat>\n"
        "<*, w, //home/scatter.dat> -> <IO, //S1/scatter.dat>, "
        "<IO, //S2/scatter.dat>\n"
        "<*, *, //home/fwd/*> -> <IO, //S3/fwd/*>\n");
  const std::string m = mnt_.path();

  // Endpoint routing: the file lives on S1 only, and is listed once.
  WriteWholeFile(m + "/remote.dat", "remote bytes");
  EXPECT_EQ(ReadWholeFile(r1_ / "remote.dat"), "remote bytes");
  EXPECT_FALSE(std::filesystem::exists(home_ / "remote.dat"));
  EXPECT_EQ(ReadWholeFile(m + "/remote.dat"), "remote bytes");
  struct stat st {};
  ASSERT_EQ(stat((m + "/remote.dat").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 12);
  const auto names = List(m);
  EXPECT_EQ(std::count(names.begin(), names.end(), "remote.dat"), 1);

  // A byte range on S2, the rest at home.
  std::string data(12288, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  ASSERT_EQ(PwriteAll(m + "/ranged.dat", data, 0), 0);
  const int fd = open((m + "/ranged.dat").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string back(data.size(), '\0');
  ASSERT_EQ(pread(fd, back.data(), back.size(), 0),
            static_cast<ssize_t>(back.size()));
  close(fd);
  EXPECT_EQ(back, data);
  const std::string on_s2 = ReadWholeFile(r2_ / "ranged.dat");
  ASSERT_EQ(on_s2.size(), 8192u);
  EXPECT_EQ(on_s2.substr(4096), data.substr(4096, 4096));
  EXPECT_EQ(ReadWholeFile(home_ / "ranged.dat").substr(4096, 4096),
            std::string(4096, '\0'));

  // Scatter: both servers hold identical bytes.
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i % 251);
  ASSERT_EQ(PwriteAll(m + "/scatter.dat", big, 0), 0);
  EXPECT_EQ(ReadWholeFile(r1_ / "scatter.dat"), big);
  EXPECT_EQ(ReadWholeFile(r2_ / "scatter.dat"), big);
  ASSERT_EQ(stat((m + "/scatter.dat").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 1 << 20);  // the home grew with the detoured write

  // Forwarding: the FUSE host sends fwd/ to S3, whose own rule sends it on
  // to S1 (making the parent there).
  ASSERT_EQ(mkdir((m + "/fwd").c_str(), 0755), 0);
  WriteWholeFile(m + "/fwd/x", "forwarded");
  EXPECT_EQ(ReadWholeFile(r1_ / "fwd/x"), "forwarded");
  EXPECT_FALSE(std::filesystem::exists(r3_ / "fwd/x"));
  EXPECT_EQ(ReadWholeFile(m + "/fwd/x"), "forwarded");
  EXPECT_EQ(List(m + "/fwd"), (std::vector<std::string>{".", "..", "x"}));

  // S3's rule counted the forwarded IOs.
  auto [rc, out] = Ctl("--host " + s3->address() + " --secret-file " + secret_ +
                       " stats --json");
  ASSERT_EQ(rc, 0) << out;
  const proto::CtlHostStats stats = FromJson<proto::CtlHostStats>(out);
  bool forwarding = false;
  for (const proto::CtlRule& r : stats.rules()) {
    forwarding |= r.rule().find("//S3/fwd/*") != std::string::npos;
    EXPECT_GT(r.ops(), 0u) << out;
  }
  EXPECT_TRUE(forwarding) << out;
}

TEST_F(ServerTest, KilledServerFailsIoWithinTheDeadlineAndComesBack) {
  ServerProcess* s1 = StartServer("S1", r1_.path());
  const int port = s1->port();
  std::filesystem::create_directories(home_ / "r");
  Mount({"S1=" + s1->address()}, "<*, *, //home/r/*> -> <IO, //S1/r/*>\n",
        {"--remote-timeout-ms", "3000"});
  const std::string m = mnt_.path();
  WriteWholeFile(m + "/r/f", "");
  // A writer appends 4 KiB blocks; every block it saw acknowledged must
  // survive the crash.
  std::atomic<bool> stop{false};
  std::atomic<int> acked{0};
  std::atomic<int> first_error{0};
  std::atomic<int64_t> error_after_ms{-1};
  std::atomic<int64_t> killed_at_ms{-1};
  auto now_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  std::thread writer([&] {
    const int fd = open((m + "/r/f").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    for (int i = 0; !stop; ++i) {
      const std::string block(4096, static_cast<char>('a' + i % 26));
      const ssize_t n = pwrite(fd, block.data(), block.size(), i * 4096L);
      if (n != 4096) {
        first_error = errno;
        error_after_ms = now_ms() - killed_at_ms;
        break;
      }
      acked = i + 1;
    }
    close(fd);
  });
  for (int i = 0; i < 20000 && acked < 50 && first_error == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (acked < 50) {
    stop = true;
    writer.join();
    FAIL() << "the writer failed early: errno " << first_error.load();
  }
  killed_at_ms = now_ms();
  s1->Kill();
  writer.join();  // ends at its first error
  EXPECT_TRUE(first_error == EIO || first_error == ETIMEDOUT)
      << "errno " << first_error;
  EXPECT_LT(error_after_ms.load(), 5000);
  // Files routed elsewhere are still served.
  WriteWholeFile(m + "/local", "still here");
  EXPECT_EQ(ReadWholeFile(m + "/local"), "still here");
  // A read of the dead server's file fails fast too.
  EXPECT_TRUE(ReadWholeFile(m + "/r/f").empty());

  // Back on the same port: IO resumes without a remount.
  StartServer("S1", r1_.path(), {}, port);
  std::string back;
  EXPECT_TRUE(Eventually([&] {
    back = ReadWholeFile(m + "/r/f");
    return !back.empty();
  }));
  ASSERT_GE(back.size(), acked * 4096u);
  for (int i = 0; i < acked; ++i) {
    ASSERT_EQ(back.substr(i * 4096, 4096),
              std::string(4096, static_cast<char>('a' + i % 26)))
        << "acknowledged block " << i << " lost";
  }
  EXPECT_EQ(PwriteAll(m + "/r/f", "after restart", 0), 0);
  EXPECT_EQ(ReadWholeFile(r1_ / "r/f").substr(0, 13), "after restart");
}

TEST_F(ServerTest, AStoppedServerTimesOutInsteadOfHanging) {
  ServerProcess* s1 = StartServer("S1", r1_.path());
  WriteWholeFile(home_ / "slow", "");
  WriteWholeFile(r1_ / "slow", "slow data");
  Mount({"S1=" + s1->address()}, "<*, r|w, //home/slow> -> <IO, //S1/slow>\n",
        {"--remote-timeout-ms", "1000"});
  const std::string f = mnt_ / "slow";
  char buf[64];
  int fd = open(f.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pread(fd, buf, sizeof(buf), 0), 9);
  kill(s1->pid(), SIGSTOP);
  // kill(2) only queues the stop: wait until every thread of the server has
  // stopped, or a request that is already being served may still answer.
  ASSERT_TRUE(::sroute::testing::WaitAllThreadsStopped(s1->pid()));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(pread(fd, buf, sizeof(buf), 0), -1);
  EXPECT_EQ(errno, ETIMEDOUT);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  kill(s1->pid(), SIGCONT);
  // A slow machine may need a reconnection or two (each with its backoff).
  ssize_t n = -1;
  for (int i = 0; i < 200 && n != 9; ++i) {
    n = pread(fd, buf, sizeof(buf), 0);
    if (n != 9) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(n, 9);
  close(fd);
}

TEST_F(ServerTest, WrongSecretIsRefused) {
  ServerProcess* s1 = StartServer("S1", r1_.path());
  const std::string wrong =
      WriteSecretFile(keys_ / "wrong", "not-the-cluster-secret-at-all");
  auto [rc, out] =
      Ctl("--host " + s1->address() + " --secret-file " + wrong + " rules ls");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("handshake"), std::string::npos) << out;
  std::tie(rc, out) = Ctl("--host " + s1->address() + " --secret-file " +
                          secret_ + " rules ls");
  EXPECT_EQ(rc, 0) << out;
  // A volume with the wrong secret cannot reach the server's files.
  WriteWholeFile(home_ / "x", "");
  WriteWholeFile(r1_ / "x", "secret data");
  WriteWholeFile(ctl_ / "r.rules", "<*, r, //home/x> -> <IO, //S1/x>\n");
  volume_ = std::make_unique<MountedVolume>(
      SROUTE_FUSE_BINARY, mnt_.path(),
      std::vector<std::string>{"--backing", home_.path(), "--secret-file",
                               wrong, "--endpoint", "S1=" + s1->address(),
                               "--kernel-cache", "off", "--rules",
                               ctl_ / "r.rules"});
  ASSERT_TRUE(volume_->ok());
  // Reads of x (open included) go to S1, which refuses this host.
  EXPECT_EQ(open((mnt_ / "x").c_str(), O_RDONLY), -1);
  EXPECT_EQ(errno, EIO);
}

TEST_F(ServerTest, MissingOrPublicSecretFilesAreClearErrors) {
  const std::string open_secret = keys_ / "public";
  WriteWholeFile(open_secret, kSecret);
  chmod(open_secret.c_str(), 0644);
  auto [rc, out] =
      RunCommand(std::string(SROUTE_SERVER_BINARY) + " --root " + r1_.path() +
                 " --listen 127.0.0.1:0" + " --secret-file " + open_secret);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("chmod 600"), std::string::npos) << out;
  std::tie(rc, out) = RunCommand(std::string(SROUTE_FUSE_BINARY) + " " +
                                 mnt_.path() + " -f --backing " + home_.path() +
                                 " --endpoint S1=127.0.0.1:1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--secret-file"), std::string::npos) << out;
  std::tie(rc, out) = RunCommand(
      std::string(SROUTE_SERVER_BINARY) + " --root /nonexistent/root" +
      " --listen 127.0.0.1:0 --secret-file " + secret_);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("/nonexistent/root"), std::string::npos) << out;
}

// Raw connections to a real server: whatever they send, it logs, drops
// that connection and goes on serving.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

bool ClosedByPeer(int fd) {
  char buf[256];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

TEST_F(ServerTest, GarbageTruncatedAndOversizedFramesDoNotHurtTheServer) {
  ServerProcess* s1 = StartServer("S1", r1_.path());
  const std::vector<std::string> inputs = {
      std::string("GET / HTTP/1.0\r\n\r\n"),
      std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8),
      std::string("\0\0\0\x10\0\0\0\0short", 13),  // truncated, then closed
      std::string("\0\0\0\x05\0\0\0\0\x0a\x03\x01\x02\x03", 13),
  };
  for (const std::string& in : inputs) {
    const int fd = Connect(s1->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, in.data(), in.size()), static_cast<ssize_t>(in.size()));
    if (in.size() == 13 && in[3] == '\x10') {
      close(fd);  // hang up mid-frame
      continue;
    }
    EXPECT_TRUE(ClosedByPeer(fd)) << "input of " << in.size() << " bytes";
    close(fd);
  }
  // Many connections that send nothing at all are timed out, not kept.
  auto [rc, out] =
      Ctl("--host " + s1->address() + " --secret-file " + secret_ + " stats");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(kill(s1->pid(), 0), 0);  // alive
}

TEST_F(ServerTest, PathsThatEscapeTheRootAreRefused) {
  WriteWholeFile(r1_ / "inside", "ok");
  ASSERT_EQ(symlink("/etc", (r1_ / "esc").c_str()), 0);
  ServerProcess* s1 = StartServer("S1", r1_.path());
  IoThreads threads(1);
  RpcChannel::Options o;
  o.address = s1->address();
  o.secret = kSecret;
  o.name = "attacker";
  auto ch = *RpcChannel::Create(&threads, o);
  auto read = [&](const std::string& path) -> absl::Status {
    proto::RpcRequest req;
    auto* io = req.mutable_io();
    io->mutable_header()->set_op(0);  // read
    io->mutable_header()->set_length(4096);
    io->set_path(path);
    std::string payload;
    auto r = ch->CallSync(req, absl::Seconds(5), {}, &payload);
    return r.status();
  };
  EXPECT_TRUE(read("inside").ok());
  for (const char* bad : {"../../etc/passwd", "../outside", "esc/passwd",
                          "/etc/passwd", "a/../../etc/passwd"}) {
    absl::Status s = read(bad);
    EXPECT_FALSE(s.ok()) << bad;
  }
  // Renames and links may not name an outside path either.
  proto::RpcRequest mv;
  mv.mutable_io()->mutable_header()->set_op(24);  // rename_from
  mv.mutable_io()->set_path("inside");
  mv.mutable_io()->mutable_args()->set_second_file("../stolen");
  EXPECT_FALSE(ch->CallSync(mv, absl::Seconds(5)).ok());
  EXPECT_TRUE(std::filesystem::exists(r1_ / "inside"));
}

TEST_F(ServerTest, AFullServerReportsEnospcAndKeepsWhatItAcknowledged) {
  // A 2 MiB tmpfs as the server's root.
  TempDir small;
  ASSERT_EQ(mount("tmpfs", small.path().c_str(), "tmpfs", 0, "size=2m"), 0)
      << strerror(errno);
  struct Unmount {
    std::string p;
    ~Unmount() { umount2(p.c_str(), MNT_DETACH); }
  } unmount{small.path()};
  ServerProcess* s1 =
      StartServer("S1", small.path(), {"--state", ctl_ / "state"});
  std::filesystem::create_directories(home_ / "full");
  Mount({"S1=" + s1->address()},
        "<*, *, //home/full/*> -> <IO, //S1/full/*>\n");
  const std::string f = mnt_ / "full/f";
  WriteWholeFile(f, "");
  const int fd = open(f.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  std::vector<std::string> acked;
  int err = 0;
  for (int i = 0; i < 64; ++i) {
    const std::string chunk(64 * 1024, static_cast<char>('A' + i % 26));
    const ssize_t n = pwrite(fd, chunk.data(), chunk.size(), i * 65536L);
    if (n != static_cast<ssize_t>(chunk.size())) {
      err = n < 0 ? errno : ENOSPC;
      break;
    }
    acked.push_back(chunk);
  }
  close(fd);
  EXPECT_EQ(err, ENOSPC);
  ASSERT_FALSE(acked.empty());
  const std::string back = ReadWholeFile(f);
  ASSERT_GE(back.size(), acked.size() * 65536);
  for (size_t i = 0; i < acked.size(); ++i) {
    ASSERT_EQ(back.substr(i * 65536, 65536), acked[i]) << "chunk " << i;
  }
}

TEST_F(ServerTest, TrackWritesLeavesExactlyItsRulesOnTheServer) {
  ServerProcess* s2 = StartServer("S2", r2_.path());
  WriteWholeFile(home_ / "vhd", std::string(128 * 1024, 'o'));
  WriteWholeFile(r2_ / "vhd.tmp", "");
  Mount({"S2=" + s2->address()},
        "<*, w, //home/vhd> -> track_writes(); <IO, //S2/vhd.tmp>\n");
  const std::string m = mnt_.path();
  // Three separate blocks (not adjacent: each keeps its own rule).
  for (int block : {0, 4, 16}) {
    ASSERT_EQ(PwriteAll(m + "/vhd", std::string(4096, 'n'), block * 4096L), 0);
  }
  const std::string back = ReadWholeFile(m + "/vhd");
  ASSERT_EQ(back.size(), 128u * 1024);
  for (int b = 0; b < 32; ++b) {
    const char want = (b == 0 || b == 4 || b == 16) ? 'n' : 'o';
    EXPECT_EQ(back.substr(b * 4096, 4096), std::string(4096, want)) << b;
  }
  // The FUSE host's read rules...
  auto [rc, out] = Ctl("--host unix:" + (ctl_ / "sock") + " rules ls");
  ASSERT_EQ(rc, 0) << out;
  std::set<std::string> host_rules;
  for (const std::string& line : OutputLines(out)) {
    std::string text = line.substr(line.find(": ") + 2);
    text = text.substr(0, text.find("  # owner="));
    if (text.find("<*, r, //home/vhd[") == 0) host_rules.insert(text);
  }
  ASSERT_EQ(host_rules.size(), 3u) << out;
  // ... are exactly the records S2 stored with the writes.
  std::tie(rc, out) = Ctl("--host " + s2->address() + " --secret-file " +
                          secret_ + " records --sswitch fuse-test");
  ASSERT_EQ(rc, 0) << out;
  std::set<std::string> records;
  for (const std::string& line : OutputLines(out)) {
    // "SSWITCH SEQ RULE"
    const size_t a = line.find(' '), b = line.find(' ', a + 1);
    EXPECT_EQ(line.substr(0, a), "fuse-test");
    records.insert(line.substr(b + 1));
  }
  EXPECT_EQ(records, host_rules);
  std::tie(rc, out) = Ctl("--host " + s2->address() + " --secret-file " +
                          secret_ + " records --sswitch fuse-test --json");
  ASSERT_EQ(rc, 0) << out;
  std::set<std::string> json_records;
  const auto listed = FromJson<proto::CtlRecords>(out);
  for (const proto::CtlRecord& r : listed.records()) {
    EXPECT_EQ(r.sswitch(), "fuse-test") << out;
    json_records.insert(r.rule());
  }
  EXPECT_EQ(json_records, host_rules) << out;
  std::tie(rc, out) = Ctl("--host " + s2->address() + " --secret-file " +
                          secret_ + " records --sswitch someone-else");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "");
}

TEST_F(ServerTest, SroutectlManagesAServersRules) {
  ServerProcess* s1 =
      StartServer("S1", r1_.path(), {"--endpoint", "alt=" + r2_.path()});
  const std::string host =
      "--host " + s1->address() + " --secret-file " + secret_;
  auto [rc, out] =
      Ctl(host + " rules add '<*, *, //S1/a/*> -> <IO, //alt/a/*>'");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Ctl(host + " rules ls");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("<*, *, //S1/a/*> -> <IO, //alt/a/*>"), std::string::npos)
      << out;
  std::tie(rc, out) =
      Ctl(host + " rules add '<*, *, //S1/b> -> <IO, //nowhere/b>'");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("nowhere"), std::string::npos) << out;
  std::tie(rc, out) = Ctl(host + " rules rm '<*, *, //S1/a/*>'");
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Ctl(host + " rules ls");
  EXPECT_EQ(out, "");
}

// SIGHUP reads the rules file again: its rules are replaced in one update;
// a bad file changes nothing, and the server goes on.
TEST_F(ServerTest, SighupReloadsTheRulesFile) {
  const std::string rules = ctl_ / "s1.rules";
  WriteWholeFile(rules, "<*, *, //S1/a/*> -> <IO, //alt/a/*>\n");
  ServerProcess* s1 = StartServer(
      "S1", r1_.path(), {"--endpoint", "alt=" + r2_.path(), "--rules", rules});
  const std::string host =
      "--host " + s1->address() + " --secret-file " + secret_;
  auto listing = [&] { return Ctl(host + " rules ls").second; };
  ASSERT_NE(listing().find("//S1/a/*"), std::string::npos) << listing();
  // A rule added by hand is not the file's: it stays.
  auto [rc, out] = Ctl(host + " rules add '<*, r, //S1/x> -> <IO, //alt/x>'");
  ASSERT_EQ(rc, 0) << out;

  WriteWholeFile(rules,
                 "<*, *, //S1/b/*> -> <IO, //alt/b/*>\n"
                 "<*, *, //S1/c> -> <IO, //alt/c>\n");
  ASSERT_EQ(kill(s1->pid(), SIGHUP), 0);
  auto reloaded = [&] {
    const std::string l = listing();
    return l.find("//S1/b/*") != std::string::npos &&
           l.find("//S1/a/*") == std::string::npos;
  };
  for (int i = 0; i < 100 && !reloaded(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string after = listing();
  EXPECT_TRUE(reloaded()) << after;
  EXPECT_NE(after.find("//S1/c> -> <IO, //alt/c>"), std::string::npos);
  EXPECT_NE(after.find("//S1/x> -> <IO, //alt/x>"), std::string::npos);

  // A bad file (a parse error; then an unknown endpoint): nothing changes.
  for (const char* bad : {"<*, q, //S1/d> -> <IO, //alt/d>\n",
                          "<*, *, //S1/d> -> <IO, //nowhere/d>\n"}) {
    WriteWholeFile(rules, bad);
    ASSERT_EQ(kill(s1->pid(), SIGHUP), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(listing(), after) << bad;
  }
  EXPECT_EQ(Ctl(host + " stats").first, 0);  // still serving
}

TEST_F(ServerTest, ServerTakesAConfigFileAndAControlSocketLikeAVolume) {
  // The same HostConfig as sroute-fuse's: endpoints, rules, control socket.
  WriteWholeFile(ctl_ / "s1.conf",
                 "name: \"S1\"\n"
                 "root: \"" +
                     r1_.path() +
                     "\"\n"
                     "endpoint { name: \"alt\" dir: \"" +
                     r2_.path() +
                     "\" }\n"
                     "rule: \"<*, *, //S1/a/*> -> <IO, //alt/a/*>\"\n"
                     "control_socket: \"" +
                     (ctl_ / "s1.sock") + "\"\n");
  auto s1 = std::make_unique<ServerProcess>(
      SROUTE_SERVER_BINARY,
      std::vector<std::string>{"--config", ctl_ / "s1.conf", "--secret-file",
                               secret_, "--listen", "127.0.0.1:0"});
  ASSERT_TRUE(s1->ok());
  auto [rc, out] = Ctl("--host unix:" + (ctl_ / "s1.sock") + " rules ls");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("<*, *, //S1/a/*> -> <IO, //alt/a/*>"), std::string::npos)
      << out;
  // IO from a volume follows the config's rule on the server.
  for (const std::string& d : {home_ / "a", r1_ / "a", r2_ / "a"}) {
    ASSERT_EQ(mkdir(d.c_str(), 0755), 0) << d;
  }
  Mount({"S1=" + s1->address()}, "<*, *, //home/a/*> -> <IO, //S1/a/*>\n");
  WriteWholeFile(mnt_ / "a/f", "through the server's rule");
  EXPECT_EQ(ReadWholeFile(r2_ / "a/f"), "through the server's rule");
  std::tie(rc, out) =
      Ctl("--host unix:" + (ctl_ / "s1.sock") + " stats --json");
  ASSERT_EQ(rc, 0) << out;
  const auto gauges = FromJson<proto::CtlHostStats>(out).gauges();
  EXPECT_TRUE(std::any_of(gauges.begin(), gauges.end(), [](const auto& g) {
    return g.first.starts_with("io_version ");
  })) << out;
  volume_.reset();
  s1.reset();

  // A volume's field in a server's config is refused by its name.
  WriteWholeFile(ctl_ / "bad.conf",
                 "root: \"" + r1_.path() + "\"\nkernel_cache: \"off\"\n");
  std::tie(rc, out) =
      RunCommand(std::string(SROUTE_SERVER_BINARY) + " --config " +
                 (ctl_ / "bad.conf") + " --secret-file " + secret_);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("kernel_cache: only for sroute-fuse"), std::string::npos)
      << out;
}

// stage://SERVER/NAME: a volume whose home is a server sends IOs through a
// stage of that server, which hands them to the server's own rules; both
// hosts count the hop.
TEST_F(ServerTest, RemoteStageOnAServerSeesTheIoAndHandsItToTheServersRules) {
  ServerProcess* s1 =
      StartServer("S1", r1_.path(),
                  {"--stage", "sc=delay:delay_us=50", "--rule",
                   "<stage:sc, *, //S1/st/*> -> <IO, //S1/st/*>"});
  ASSERT_EQ(mkdir((r1_ / "st").c_str(), 0755), 0);
  volume_ = std::make_unique<MountedVolume>(
      SROUTE_FUSE_BINARY, mnt_.path(),
      std::vector<std::string>{
          "--backing", s1->address(), "--secret-file", secret_,
          "--kernel-cache", "off", "--control", ctl_ / "sock", "--rule",
          "<*, *, //home/st/*> -> <IO, stage://home/sc>", "--rule",
          "<*, *, //home/bad/*> -> <IO, stage://home/nope>"});
  ASSERT_TRUE(volume_->ok());
  WriteWholeFile(mnt_ / "st/f", "through the server's stage");
  EXPECT_EQ(ReadWholeFile(r1_ / "st/f"), "through the server's stage");
  EXPECT_EQ(ReadWholeFile(mnt_ / "st/f"), "through the server's stage");

  // The volume's rule counted the IOs it sent to the remote stage ...
  auto [rc, out] = Ctl("--host unix:" + (ctl_ / "sock") + " stats --json");
  ASSERT_EQ(rc, 0) << out;
  int to_stage = 0;
  const auto volume_stats = FromJson<proto::CtlHostStats>(out);
  for (const proto::CtlRule& r : volume_stats.rules()) {
    if (!r.rule().ends_with("stage://home/sc>")) continue;
    ++to_stage;
    EXPECT_EQ(r.owner(), "config") << out;
    EXPECT_GT(r.ops(), 0u) << out;
  }
  EXPECT_EQ(to_stage, 1) << out;
  // ... the server's stage saw them, and its rule for what the stage hands
  // back counted them too.
  const std::string server =
      "--host " + s1->address() + " --secret-file " + secret_;
  std::tie(rc, out) = Ctl(server + " stages ls --json");
  ASSERT_EQ(rc, 0) << out;
  const auto stages = StagesOf(out);
  ASSERT_EQ(stages.size(), 1) << out;
  EXPECT_EQ(stages[0].config().name(), "sc") << out;
  EXPECT_GT(stages[0].ios(), 0u) << out;
  std::tie(rc, out) = Ctl(server + " stats --json");
  ASSERT_EQ(rc, 0) << out;
  bool handed_back = false;
  const auto server_stats = FromJson<proto::CtlHostStats>(out);
  for (const proto::CtlRule& r : server_stats.rules()) {
    handed_back |= r.rule().starts_with("<stage:sc, *, //S1/st/*>");
    EXPECT_GT(r.ops(), 0u) << out;
  }
  EXPECT_TRUE(handed_back) << out;

  // A stage the server does not have: the IO fails, nothing hangs.
  ASSERT_EQ(mkdir((r1_ / "bad").c_str(), 0755), 0);
  const int fd = open((mnt_ / "bad/x").c_str(), O_CREAT | O_WRONLY, 0644);
  EXPECT_LT(fd, 0);
  if (fd >= 0) close(fd);
}

// Close-to-open across two volumes through a cache on their server: every
// write of one volume passes the server's sSwitch, so the server's cache
// never serves the other volume a stale block. Each trial writes new bytes
// on volume A and closes, then opens and reads them on volume B.
TEST_F(ServerTest, CloseToOpenAcrossTwoVolumesThroughAServerSideCache) {
  ServerProcess* s1 = StartServer(
      "S1", r1_.path(),
      {"--stage", "sc=cache:partition_by=none,partition_bytes=4M", "--control",
       ctl_ / "s1.sock", "--rule", "<*, *, //S1/c2o/*> -> <IO, stage:sc>"});
  ASSERT_EQ(mkdir((r1_ / "c2o").c_str(), 0755), 0);
  TempDir mnt_b, ctl_b;
  auto mount = [&](const std::string& at, const std::string& sock) {
    return std::make_unique<MountedVolume>(
        SROUTE_FUSE_BINARY, at,
        std::vector<std::string>{"--backing", s1->address(), "--secret-file",
                                 secret_, "--kernel-cache", "off", "--control",
                                 sock});
  };
  auto a = mount(mnt_.path(), ctl_ / "a.sock");
  auto b = mount(mnt_b.path(), ctl_b / "b.sock");
  ASSERT_TRUE(a->ok() && b->ok());
  const std::string on_a = mnt_ / "c2o/f", on_b = mnt_b / "c2o/f";
  WriteWholeFile(on_a, std::string(16384, 'x'));
  constexpr int kTrials = 10000;
  int fresh = 0;
  std::mt19937_64 rng(11);
  std::string block(4096, '\0');
  for (int t = 0; t < kTrials; ++t) {
    const off_t off = static_cast<off_t>(rng() % 4) * 4096;
    for (size_t i = 0; i < block.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(&block[i], &v, 8);
    }
    const int w = open(on_a.c_str(), O_WRONLY);
    ASSERT_GE(w, 0);
    ASSERT_EQ(pwrite(w, block.data(), block.size(), off), 4096);
    ASSERT_EQ(close(w), 0);
    const int r = open(on_b.c_str(), O_RDONLY);
    ASSERT_GE(r, 0);
    std::string got(4096, '\0');
    ASSERT_EQ(pread(r, got.data(), got.size(), off), 4096);
    close(r);
    fresh += got == block;
  }
  EXPECT_EQ(fresh, kTrials);
  // The server's cache served reads (it is not bypassed).
  auto [rc, out] =
      Ctl("--host unix:" + (ctl_ / "s1.sock") + " stages ls --json");
  ASSERT_EQ(rc, 0) << out;
  for (const proto::StageStats& stage : StagesOf(out)) {
    EXPECT_GT(stage.ios(), 0u) << out;
  }
  b.reset();
  a.reset();
}

// A traced IO's whole path: the volume samples it (trace()), sends it to S3,
// whose own rule forwards it to S1. The volume keeps the path: its rule and
// rpc hop, S3's hops one level deeper (its rule and its rpc to S1), S1's
// two deeper.
TEST_F(ServerTest, ATracedIoShowsEveryHopAcrossServers) {
  ServerProcess* s1 = StartServer("S1", r1_.path());
  ServerProcess* s3 =
      StartServer("S3", r3_.path(),
                  {"--endpoint", "S1=" + s1->address(), "--rule",
                   "<*, *, //S3/fwd/*> -> <IO, //S1/fwd/*>"});
  ASSERT_EQ(mkdir((r1_ / "fwd").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((r3_ / "fwd").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((home_ / "fwd").c_str(), 0755), 0);
  WriteWholeFile(r1_ / "fwd/x", "");
  Mount({"S1=" + s1->address(), "S3=" + s3->address()},
        "<*, w, //home/fwd/x> -> trace(); <IO, //S3/fwd/x>\n"
        "<*, *, //home/fwd/*> -> <IO, //S3/fwd/*>\n");
  const int fd = open((mnt_ / "fwd/x").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "traced", 6, 0), 6);
  close(fd);
  EXPECT_EQ(ReadWholeFile(r1_ / "fwd/x"), "traced");
  auto [rc, out] = Ctl("--host unix:" + (ctl_ / "sock") + " traces");
  ASSERT_EQ(rc, 0) << out;
  // The write's path, innermost hops first.
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_FALSE(lines.empty()) << out;
  EXPECT_NE(lines[0].find("write //home/fwd/x [0+6] tenant "),
            std::string::npos)
      << out;
  auto has = [&](const std::string& what) {
    for (const std::string& l : lines) {
      if (l.find(what) != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has("      S1 default -> //S1/fwd/x")) << out;
  EXPECT_TRUE(has("    S3 rpc -> " + s1->address())) << out;
  EXPECT_TRUE(has("    S3 rule 1 -> //S1/fwd/x")) << out;
  EXPECT_TRUE(has("  fuse-test rpc -> " + s3->address())) << out;
  EXPECT_TRUE(has("  fuse-test rule 1 -> //S3/fwd/x")) << out;
  // JSON: the same, with every hop.
  std::tie(rc, out) = Ctl("--host unix:" + (ctl_ / "sock") + " traces --json");
  ASSERT_EQ(rc, 0) << out;
  const proto::CtlTraces traces = FromJson<proto::CtlTraces>(out);
  ASSERT_GT(traces.traces_size(), 0) << out;
  EXPECT_EQ(traces.traces(0).op(), "write") << out;
  EXPECT_EQ(traces.traces(0).file(), "//home/fwd/x") << out;
  bool deep = false, rpc = false;
  for (const proto::CtlTrace& t : traces.traces()) {
    for (const proto::CtlHop& h : t.hops()) {
      deep |= h.depth() == 2;
      rpc |= h.kind() == "rpc";
    }
  }
  EXPECT_TRUE(deep) << out;
  EXPECT_TRUE(rpc) << out;
}

// Slow-op capture on a volume: writes through a delay stage of 20 ms are
// caught over a 10 ms threshold, fast ones are not, and --threshold-ms 0
// turns capture off.
TEST_F(ServerTest, SlowIosAreCaughtWithoutSampling) {
  ASSERT_EQ(mkdir((home_ / "s").c_str(), 0755), 0);
  WriteWholeFile(home_ / "s/slow", "");
  WriteWholeFile(home_ / "s/fast", "");
  Mount({},
        "<*, w, //home/s/slow> -> <IO, stage:d>\n"
        "<*, w, //home/s/fast> -> <IO, //home/s/fast>\n",
        {"--stage", "d=delay:delay_us=20000"});
  const std::string ctl = "--host unix:" + (ctl_ / "sock") + " ";
  auto [rc, out] = Ctl(ctl + "slow --threshold-ms 10");
  ASSERT_EQ(rc, 0) << out;
  for (int i = 0; i < 3; ++i) WriteWholeFile(mnt_ / "s/slow", "slow");
  for (int i = 0; i < 50; ++i) WriteWholeFile(mnt_ / "s/fast", "fast");
  std::tie(rc, out) = Ctl(ctl + "slow");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("slow: 3 IOs at or over 10000.0 us"), std::string::npos)
      << out;
  EXPECT_NE(out.find("write //home/s/slow [0+4]"), std::string::npos) << out;
  EXPECT_EQ(out.find("//home/s/fast"), std::string::npos) << out;
  std::tie(rc, out) = Ctl(ctl + "slow --json");
  ASSERT_EQ(rc, 0) << out;
  const proto::CtlSlowOps slow = FromJson<proto::CtlSlowOps>(out);
  EXPECT_EQ(slow.slow_total(), 3u) << out;
  EXPECT_EQ(slow.slow_threshold_ns(), 10'000'000u) << out;
  ASSERT_GT(slow.slow_recent_size(), 0) << out;
  EXPECT_EQ(slow.slow_recent(0).file(), "//home/s/slow") << out;
  // Off: nothing more is caught.
  std::tie(rc, out) = Ctl(ctl + "slow --threshold-ms 0 --clear");
  ASSERT_EQ(rc, 0) << out;
  WriteWholeFile(mnt_ / "s/slow", "slow");
  std::tie(rc, out) = Ctl(ctl + "slow");
  EXPECT_NE(out.find("slow: 3 IOs"), std::string::npos) << out;
  EXPECT_EQ(out.find("write //home/s/slow"), std::string::npos) << out;
}

// Opens through a server carry its change stamp: the same while the file
// is unchanged, another after any change to it (even one that keeps its
// size), and another again from the next run of the server.
TEST_F(ServerTest, OpensCarryAChangeStamp) {
  ServerProcess* s1 = StartServer("S1", r1_.path());
  WriteWholeFile(r1_ / "f", "abcd");
  IoThreads threads(1);
  auto stamp_of_open = [&](ServerProcess* server) -> uint64_t {
    RemoteEndpoint::Options o;
    o.address = server->address();
    o.secret = kSecret;
    auto ep = RemoteEndpoint::Create(&threads, o);
    EXPECT_TRUE(ep.ok()) << ep.status();
    if (!ep.ok()) return 0;
    EmbeddedHost host("probe");
    EXPECT_TRUE(host.AddEndpoint("S1", *ep).ok());
    Io io;
    io.header = {"t", "", Op::kOpen, "//S1/f", 0, 0};
    io.args.open_flags = O_RDONLY;
    std::atomic<bool> done{false};
    io.set_completion([&](Io&) { done = true; });
    host.sswitch().Route(&io);
    while (!done.load())
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(io.status.ok()) << io.status;
    EXPECT_EQ(io.attr.st_size, 4);  // opens carry the file's attributes
    return io.change_stamp;
  };
  const uint64_t first = stamp_of_open(s1);
  EXPECT_NE(first, 0u);
  EXPECT_EQ(stamp_of_open(s1), first);
  {  // A write of the same size, through the server (from a volume).
    MountedVolume vol(SROUTE_FUSE_BINARY, mnt_.path(),
                      {"--backing", s1->address(), "--secret-file", secret_,
                       "--kernel-cache", "off"});
    ASSERT_TRUE(vol.ok());
    const int fd = open((mnt_ / "f").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, "wxyz", 4, 0), 4);
    close(fd);
  }
  const uint64_t second = stamp_of_open(s1);
  EXPECT_NE(second, first);
  EXPECT_EQ(stamp_of_open(s1), second);
  // Another run of a server on the same files: other stamps.
  servers_.clear();
  ServerProcess* again = StartServer("S1", r1_.path());
  EXPECT_NE(stamp_of_open(again), second);
}

// Close-to-open through a cache on the reading volume's own host: volume A
// writes straight to the server, volume B reads through its cache. Each
// trial keeps the file's size and is quicker than a timestamp tick, so only
// the server's change stamp in B's open tells B's cache the file changed.
TEST_F(ServerTest, CloseToOpenThroughACacheOnTheReadingHost) {
  ServerProcess* s1 = StartServer("S1", r1_.path(), {});
  ASSERT_EQ(mkdir((r1_ / "c2o").c_str(), 0755), 0);
  WriteWholeFile(r1_ / "c2o/f", std::string(16384, 'x'));
  TempDir mnt_b, ctl_b;
  auto mount = [&](const std::string& at, const std::string& sock,
                   std::vector<std::string> extra) {
    std::vector<std::string> args{
        "--backing",      s1->address(), "--secret-file", secret_,
        "--kernel-cache", "off",         "--control",     sock};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<MountedVolume>(SROUTE_FUSE_BINARY, at, args);
  };
  auto a = mount(mnt_.path(), ctl_ / "a.sock", {});
  auto b = mount(mnt_b.path(), ctl_b / "b.sock",
                 {"--stage", "bc=cache:partition_by=none,partition_bytes=4M",
                  "--rule", "<*, *, //home/c2o/*> -> <IO, stage:bc>"});
  ASSERT_TRUE(a->ok() && b->ok());
  const std::string on_a = mnt_ / "c2o/f", on_b = mnt_b / "c2o/f";
  constexpr int kTrials = 2000;
  int fresh = 0;
  std::mt19937_64 rng(12);
  std::string block(4096, '\0');
  for (int t = 0; t < kTrials; ++t) {
    const off_t off = static_cast<off_t>(rng() % 4) * 4096;
    for (size_t i = 0; i < block.size(); i += 8) {
      const uint64_t v = rng();
      std::memcpy(&block[i], &v, 8);
    }
    // B reads the block first, so its cache holds the old bytes.
    const int r0 = open(on_b.c_str(), O_RDONLY);
    ASSERT_GE(r0, 0);
    std::string old(4096, '\0');
    ASSERT_EQ(pread(r0, old.data(), old.size(), off), 4096);
    close(r0);
    const int w = open(on_a.c_str(), O_WRONLY);
    ASSERT_GE(w, 0);
    ASSERT_EQ(pwrite(w, block.data(), block.size(), off), 4096);
    ASSERT_EQ(close(w), 0);
    const int r = open(on_b.c_str(), O_RDONLY);
    ASSERT_GE(r, 0);
    std::string got(4096, '\0');
    ASSERT_EQ(pread(r, got.data(), got.size(), off), 4096);
    close(r);
    fresh += got == block;
  }
  EXPECT_EQ(fresh, kTrials);
  // B's cache served reads (it is not bypassed), and its opens dropped.
  auto [rc, out] =
      Ctl("--host unix:" + (ctl_b / "b.sock") + " stages ls --json");
  ASSERT_EQ(rc, 0) << out;
  for (const proto::StageStats& stage : StagesOf(out)) {
    EXPECT_GT(stage.ios(), 0u) << out;
    auto drops = stage.counters().find("open_drops");
    if (drops != stage.counters().end()) {
      EXPECT_GT(drops->second, 0) << out;
    }
  }
  b.reset();
  a.reset();
}

// POSIX parity with the whole volume on a storage server: every scenario of
// posix_scenarios.h gives the same transcript as on a plain directory.
class RemoteParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    dirs_ = new TempDir();
    std::filesystem::create_directories(*dirs_ / "root");
    std::filesystem::create_directories(*dirs_ / "mnt");
    const std::string secret = WriteSecretFile(*dirs_ / "secret", kSecret);
    server_ =
        new ServerProcess(SROUTE_SERVER_BINARY,
                          {"--root", *dirs_ / "root", "--name", "S1",
                           "--secret-file", secret, "--listen", "127.0.0.1:0"});
    volume_ = new MountedVolume(
        SROUTE_FUSE_BINARY, *dirs_ / "mnt",
        {"--backing", server_->address(), "--secret-file", secret});
  }
  static void TearDownTestSuite() {
    delete volume_;
    delete server_;
    delete dirs_;
  }
  static TempDir* dirs_;
  static ServerProcess* server_;
  static MountedVolume* volume_;
};
TempDir* RemoteParityTest::dirs_ = nullptr;
ServerProcess* RemoteParityTest::server_ = nullptr;
MountedVolume* RemoteParityTest::volume_ = nullptr;

TEST_P(RemoteParityTest, SameTranscriptAsAPlainDirectory) {
  ASSERT_TRUE(server_->ok()) << "sroute-server did not start";
  ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  const testing::Scenario* scenario = nullptr;
  static const std::vector<testing::Scenario> all = testing::PosixScenarios();
  for (const testing::Scenario& s : all) {
    if (s.name == GetParam()) scenario = &s;
  }
  ASSERT_NE(scenario, nullptr);
  TempDir plain;
  const std::string on_mount = volume_->path() + "/" + scenario->name;
  ASSERT_EQ(mkdir(on_mount.c_str(), 0755), 0);
  EXPECT_EQ(scenario->run(on_mount), scenario->run(plain.path()));
}

std::vector<std::string> ScenarioNames() {
  std::vector<std::string> names;
  for (const testing::Scenario& s : testing::PosixScenarios()) {
    names.push_back(s.name);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Posix, RemoteParityTest,
                         ::testing::ValuesIn(ScenarioNames()),
                         [](const auto& info) { return info.param; });

// --- sroute-trace ----------------------------------------------------------

// What `sroute-trace --json` printed (its notes on stderr aside).
proto::CtlPathReport PathOf(const std::string& out) {
  return FromJsonLine<proto::CtlPathReport>(out);
}

// The own time (avg ns) of the hop row of `host` and `kind` in
// `sroute-trace --json` output; -1 if there is none.
double OwnAvgNs(const std::string& json, const std::string& host,
                const std::string& kind) {
  const proto::CtlPathReport report = PathOf(json);
  for (const proto::CtlPathHop& h : report.hops()) {
    if (h.host() == host && h.kind() == kind) return h.own_avg_ns();
  }
  return -1;
}

// Writes to `path` until stopped, as a tenant's application would.
class Writer {
 public:
  explicit Writer(std::string path) : path_(std::move(path)) {
    thread_ = std::thread([this] {
      while (!stop_) {
        PwriteAll(path_, "traced", 0);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  ~Writer() {
    stop_ = true;
    thread_.join();
  }

 private:
  const std::string path_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class TraceToolTest : public ServerTest {
 protected:
  // FUSE -> S1 -> (forwarded) S2, whose writes wait 5 ms in a delay stage.
  void SetUpPath() {
    s2_ = StartServer("S2", r2_.path(),
                      {"--stage", "d=delay:delay_us=5000", "--rule",
                       "<*, w, //S2/fwd/*> -> <IO, stage:d>"});
    s1_ = StartServer("S1", r1_.path(),
                      {"--endpoint", "S2=" + s2_->address(), "--rule",
                       "<*, *, //S1/fwd/*> -> <IO, //S2/fwd/*>"});
    for (const TempDir* d : {&r1_, &r2_, &home_}) {
      ASSERT_EQ(mkdir((*d / "fwd").c_str(), 0755), 0);
    }
    WriteWholeFile(r2_ / "fwd/x", "");
    Mount({"S1=" + s1_->address()},
          "<*, *, //home/fwd/*> -> <IO, //S1/fwd/*>\n");
  }
  // The same path, open to other users: they reach every root (r3_ holds
  // the tests' stop files) and may create files in fwd/ everywhere.
  void SetUpPathForUsers() {
    for (const TempDir* d : {&home_, &r1_, &r2_, &r3_}) {
      chmod(d->path().c_str(), 0755);
    }
    SetUpPath();
    for (const TempDir* d : {&home_, &r1_, &r2_}) {
      ASSERT_EQ(chmod((*d / "fwd").c_str(), 01777), 0);
    }
  }
  std::string EmbeddedHost() { return "--host unix:" + (ctl_ / "sock"); }
  std::pair<int, std::string> Trace(const std::string& args) {
    return RunCommand(std::string(SROUTE_TRACE_BINARY) + " " + EmbeddedHost() +
                      " " + args);
  }
  // The tool in the background (its output in `out_file`); its pid.
  pid_t StartTrace(const std::string& args, const std::string& out_file = "") {
    return StartCommand(
        std::string(SROUTE_TRACE_BINARY) + " " + EmbeddedHost() + " " + args,
        out_file);
  }
  // The rules of the volume that sroute-trace owns.
  int ToolRules() {
    auto [rc, out] = Ctl(EmbeddedHost() + " rules ls");
    EXPECT_EQ(rc, 0) << out;
    int n = 0;
    for (const std::string& l : OutputLines(out)) {
      if (l.find("owner=sroute-trace:") != std::string::npos) ++n;
    }
    return n;
  }

  ServerProcess* s1_ = nullptr;
  ServerProcess* s2_ = nullptr;
};

// Every hop of FUSE -> S1 -> S2 -> stage appears in order with its host,
// kind and rule; the hops' own times add up to the end-to-end time; the
// 5 ms stage on S2 is the slowest hop; the tap is gone after the tool.
TEST_F(TraceToolTest, JsonShowsEveryHopAndTheSlowOne) {
  SetUpPath();
  Writer writer(mnt_ / "fwd/x");
  auto [rc, out] = Trace("--op w --count 20 --json //home/fwd/x");
  ASSERT_EQ(rc, 0) << out;
  const proto::CtlPathReport report = PathOf(out);
  EXPECT_EQ(report.ios(), 20u) << out;
  const auto& hops = report.hops();
  std::vector<std::string> path;
  for (const proto::CtlPathHop& h : hops) {
    path.push_back(h.host() + " " + h.kind() + " " + h.next());
  }
  const std::vector<std::string> want = {"fuse-test rule //S1/fwd/x",
                                         "fuse-test rpc " + s1_->address(),
                                         "S1 queue ",
                                         "S1 rule //S2/fwd/x",
                                         "S1 rpc " + s2_->address(),
                                         "S2 queue ",
                                         "S2 rule stage:d",
                                         "S2 stage stage:d",
                                         "S2 default //S2/fwd/x"};
  EXPECT_EQ(path, want) << out;
  ASSERT_EQ(static_cast<size_t>(hops.size()), want.size()) << out;
  EXPECT_EQ(hops[0].rule(), 1u);  // the volume's forwarding rule
  EXPECT_EQ(hops[3].rule(), 1u);  // S1's
  EXPECT_EQ(hops[6].depth(), 2u);
  // Own times: each non-negative by construction; together the
  // end-to-end time, less what no hop covers (the volume's own work
  // before its first rule and after its reply): within 10 %.
  ASSERT_EQ(report.total().samples(), 20u) << out;
  const double total = report.total().avg_ns();
  double own = 0;
  std::string slowest;
  for (const proto::CtlPathHop& h : hops) {
    own += h.own_avg_ns();
    if (h.slowest()) slowest = h.host() + " " + h.kind();
  }
  EXPECT_LE(own, total * 1.01) << out;
  EXPECT_GE(own, total * 0.9) << out;
  EXPECT_EQ(slowest, "S2 stage") << out;
  EXPECT_GE(total, 5e6) << out;
  EXPECT_EQ(ToolRules(), 0);
}

// The table: a row per hop, the slowest marked; after SIGINT the tool
// still prints it and removes its tap.
TEST_F(TraceToolTest, TextTableAndSigint) {
  SetUpPath();
  Writer writer(mnt_ / "fwd/x");
  const std::string out_file = ctl_ / "trace.out";
  const pid_t pid =
      StartTrace("--op w --interval-ms 100 //home/fwd/x", out_file);
  ASSERT_TRUE(Eventually([&] { return ToolRules() > 0; }));
  // A sampled write of each hop is in the volume's trace buffer before the
  // tool is stopped (it collects once more as it ends).
  EXPECT_TRUE(Eventually([&] {
    auto [rc, json] = Ctl(EmbeddedHost() + " traces --json");
    return rc == 0 && json.find("\"S2\"") != std::string::npos;
  }));
  kill(pid, SIGINT);
  const int rc = WaitCommand(pid);
  const std::string out = ReadWholeFile(out_file);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(ToolRules(), 0) << out;
  EXPECT_NE(out.find("path:\n  //home/fwd/x  (tapped)\n"), std::string::npos)
      << out;
  EXPECT_NE(out.find("rule 1: <*, *, //home/fwd/*> -> <IO, //S1/fwd/*>"),
            std::string::npos)
      << out;
  std::string slow_line;
  for (const std::string& l : OutputLines(out)) {
    if (l.find("<- slowest") != std::string::npos) slow_line = l;
  }
  EXPECT_NE(slow_line.find("S2"), std::string::npos) << out;
  EXPECT_NE(slow_line.find("stage"), std::string::npos) << out;
  for (const std::string host : {"fuse-test", "S1", "S2"}) {
    EXPECT_NE(out.find("  " + host + " "), std::string::npos) << out;
  }
}

// Killed, the tool cannot remove its tap: the volume does when its lease
// runs out. Alive, it renews the lease (every interval): the tap outlives
// two leases. (The lease is 3 s: a renewal a loaded machine delays by less
// keeps it.)
TEST_F(TraceToolTest, ATapOfAKilledToolGoesWithItsLease) {
  SetUpPath();
  const pid_t pid =
      StartTrace("--lease-ms 3000 --interval-ms 100 //home/fwd/x");
  ASSERT_TRUE(Eventually([&] { return ToolRules() == 1; }));
  EXPECT_TRUE(Throughout([&] { return ToolRules() == 1; }, 6))
      << "the tap went while its tool renewed the lease";
  kill(pid, SIGKILL);
  WaitCommand(pid);
  EXPECT_TRUE(Eventually([&] { return ToolRules() == 0; }));
}

// Sampling at 0: the tap stays silent; no trace is kept.
TEST_F(TraceToolTest, RateZeroKeepsNoTrace) {
  SetUpPath();
  Writer writer(mnt_ / "fwd/x");
  auto [rc, out] = Trace("--rate 0 --duration 1 --json //home/fwd/x");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(PathOf(out).ios(), 0u) << out;
  std::tie(rc, out) = Ctl(EmbeddedHost() + " traces");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("//home/fwd/x"), std::string::npos) << out;
}

// --live draws the table full-screen in a terminal.
TEST_F(TraceToolTest, LiveDrawsTheHopsInATerminal) {
  SetUpPath();
  Writer writer(mnt_ / "fwd/x");
  const std::string cmd =
      std::string("TERM=xterm COLUMNS=200 LINES=40 script -qfec '") +
      SROUTE_TRACE_BINARY + " " + EmbeddedHost() +
      " --live --interval-ms 200 --duration 2 //home/fwd/x' /dev/null";
  auto [rc, out] = RunCommand(cmd);
  ASSERT_EQ(rc, 0) << out;
  for (const char* want :
       {"HOST", "fuse-test", "S1", "S2", "stage:d", "q: quit"}) {
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  }
  EXPECT_EQ(ToolRules(), 0);
}

// Bad input is refused clearly, and nothing is installed.
TEST_F(TraceToolTest, BadInputIsRefused) {
  SetUpPath();
  auto [rc, out] = Trace("/tmp/not-in-a-volume");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("nor a path inside a mounted sroute volume"),
            std::string::npos)
      << out;
  std::tie(rc, out) = Trace("--rate 2 //home/fwd/x");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--rate must be in [0, 1]"), std::string::npos) << out;
  std::tie(rc, out) = Trace("--probe //home/fwd/x");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("--probe reads the file"), std::string::npos) << out;
  std::tie(rc, out) = RunCommand(std::string(SROUTE_TRACE_BINARY) +
                                 " --host unix:/nonexistent //home/fwd/x");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_EQ(ToolRules(), 0);
}

// --probe reads a quiet file through the mount, so its path is traced.
TEST_F(TraceToolTest, ProbesTraceAQuietPath) {
  SetUpPath();
  WriteWholeFile(r2_ / "fwd/x", std::string(64 * 1024, 'p'));
  auto [rc, out] = Trace("--probe --count 5 --json " + (mnt_ / "fwd/x"));
  ASSERT_EQ(rc, 0) << out;
  const proto::CtlPathReport report = PathOf(out);
  EXPECT_EQ(report.ios(), 5u) << out;
  EXPECT_EQ(report.path(), "<*, *, //home/fwd/x>") << out;
  bool read_at_s2 = false;
  for (const proto::CtlPathHop& h : report.hops()) {
    if (h.host() == "S2" && h.next() == "//S2/fwd/x") read_at_s2 = true;
  }
  EXPECT_TRUE(read_at_s2) << out;
}

// Writes to `path` as `user` (in a child process) until `stop_file`
// exists or a minute has passed; the child's last error, if any.
class WriterAs {
 public:
  WriterAs(const testing::User& user, std::string path, std::string stop_file)
      : stop_file_(std::move(stop_file)) {
    thread_ = std::thread([this, user, path = std::move(path)] {
      result_ = RunAs(user, [&] {
        std::string error;
        const auto until =
            std::chrono::steady_clock::now() + std::chrono::minutes(1);
        while (access(stop_file_.c_str(), F_OK) != 0 &&
               std::chrono::steady_clock::now() < until) {
          const int fd = open(path.c_str(), O_WRONLY | O_CREAT, 0644);
          if (fd < 0 || pwrite(fd, "user", 4, 0) != 4) {
            error = path + ": " + strerror(errno);
          }
          if (fd >= 0) close(fd);
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        return error;
      });
    });
  }
  // Stops the writer; what it reported.
  std::string Stop() {
    WriteWholeFile(stop_file_, "");
    if (thread_.joinable()) thread_.join();
    return result_;
  }
  ~WriterAs() { Stop(); }

 private:
  const std::string stop_file_;
  std::string result_;
  std::thread thread_;
};

// As users are: the tenant traced is an ordinary user (uid:65534) writing
// beside root; only its IOs are sampled, and a rule added while the tool
// runs neither drops the tap nor is hidden from it.
TEST_F(TraceToolTest, AUsersWritesAreTracedWhileTheRulesChange) {
  SetUpPathForUsers();
  ASSERT_EQ(mkdir((home_ / "direct").c_str(), 01777), 0);
  ASSERT_EQ(chmod((home_ / "direct").c_str(), 01777), 0);
  ASSERT_EQ(chmod((r2_ / "fwd/x").c_str(), 0666), 0);
  Writer root_writer(mnt_ / "fwd/x");
  // Root's writes are not the tenant's: nothing sampled, and said so.
  auto [rc, out] =
      Trace("--tenant uid:65534 --op w --duration 1 --json //home/fwd/x");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(PathOf(out).ios(), 0u) << out;
  EXPECT_NE(out.find("no IO matching <uid:65534, w, //home/fwd/x> was "
                     "sampled"),
            std::string::npos)
      << out;

  WriterAs user(testing::Nobody(), mnt_ / "fwd/x", r3_ / "stop");
  const std::string out_file = ctl_ / "trace.json";
  const pid_t pid = StartTrace(
      "--tenant uid:65534 --op w --interval-ms 100 --json //home/fwd/x",
      out_file);
  ASSERT_TRUE(Eventually([&] { return ToolRules() > 0; }));
  // Whether the volume sampled a write of the user's that its rules sent
  // to `next` (the tool collects the same records, and once more as it
  // ends).
  auto sampled_via = [&](const std::string& next) {
    auto [trc, json] = Ctl(EmbeddedHost() + " traces --json");
    if (trc != 0) return false;
    const proto::CtlTraces traces = FromJson<proto::CtlTraces>(json);
    for (const proto::CtlTrace& t : traces.traces()) {
      for (const proto::CtlHop& h : t.hops()) {
        if (h.host() == "fuse-test" && h.kind() == "rule" && h.next() == next) {
          return true;
        }
      }
    }
    return false;
  };
  EXPECT_TRUE(Eventually([&] { return sampled_via("//S1/fwd/x"); }));
  std::tie(rc, out) = Ctl(EmbeddedHost() +
                          " rules add '@10 <*, w, //home/fwd/x> -> <IO, "
                          "//home/direct/x>'");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(Eventually([&] { return sampled_via("//home/direct/x"); }));
  kill(pid, SIGINT);
  EXPECT_EQ(WaitCommand(pid), 0);
  out = ReadWholeFile(out_file);
  EXPECT_EQ(user.Stop(), "");
  std::set<std::string> first_hops;
  const proto::CtlPathReport report = PathOf(out);
  for (const proto::CtlPathHop& h : report.hops()) {
    if (h.host() == "fuse-test" && h.kind() == "rule") {
      first_hops.insert(h.next());
    }
  }
  EXPECT_EQ(first_hops,
            (std::set<std::string>{"//S1/fwd/x", "//home/direct/x"}))
      << out;
  EXPECT_FALSE(ReadWholeFile(home_ / "direct/x").empty());  // routed there
  EXPECT_EQ(ToolRules(), 0);
  std::tie(rc, out) = Ctl(EmbeddedHost() + " rules ls");
  EXPECT_NE(out.find("//home/direct/x"), std::string::npos) << out;
}

// SQLite, run by an ordinary user, on a file whose writes are traced
// through S1 to S2's stage: the database stays whole, the trace has its
// path.
TEST_F(TraceToolTest, SqliteOnATracedFile) {
  SetUpPathForUsers();
  const std::string db_path = mnt_ / "fwd/app.db";
  const std::string stop_file = r3_ / "stop";
  std::string app_result;
  std::thread app([&] {
    app_result = RunAs(testing::Nobody(), [&]() -> std::string {
      sqlite3* db = nullptr;
      if (sqlite3_open(db_path.c_str(), &db) != SQLITE_OK) {
        return "open: " + std::string(sqlite3_errmsg(db));
      }
      auto exec = [&](const std::string& sql) -> std::string {
        char* err = nullptr;
        if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) ==
            SQLITE_OK) {
          return "";
        }
        std::string e = sql + ": " + (err != nullptr ? err : "?");
        sqlite3_free(err);
        return e;
      };
      std::string e = exec("CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)");
      int rows = 0;
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::minutes(1);
      while (e.empty() && access(stop_file.c_str(), F_OK) != 0 &&
             std::chrono::steady_clock::now() < until) {
        e = exec(
            "BEGIN; INSERT INTO t(v) VALUES (hex(randomblob(64))); "
            "INSERT INTO t(v) VALUES ('b'); COMMIT;");
        rows += 2;
      }
      std::string check;
      sqlite3_stmt* st = nullptr;
      if (e.empty() &&
          sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &st, nullptr) ==
              SQLITE_OK &&
          sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) != rows) {
        e = "rows: " + std::to_string(sqlite3_column_int(st, 0)) + " of " +
            std::to_string(rows);
      }
      sqlite3_finalize(st);
      if (e.empty() &&
          sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, nullptr) ==
              SQLITE_OK &&
          sqlite3_step(st) == SQLITE_ROW) {
        check = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
        if (check != "ok") e = "integrity_check: " + check;
      }
      sqlite3_finalize(st);
      sqlite3_close(db);
      return e.empty() ? "ok " + std::to_string(rows) : e;
    });
  });
  auto [rc, out] = Trace(
      "--tenant uid:65534 --op w --count 10 --duration 30 --json "
      "//home/fwd/app.db");
  WriteWholeFile(stop_file, "");
  app.join();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(app_result.rfind("ok ", 0), 0u) << app_result;
  const proto::CtlPathReport report = PathOf(out);
  EXPECT_EQ(report.ios(), 10u) << out;
  std::vector<std::string> path;
  for (const proto::CtlPathHop& h : report.hops()) {
    path.push_back(h.host() + " " + h.kind());
  }
  EXPECT_NE(std::find(path.begin(), path.end(), "S2 stage"), path.end()) << out;
  EXPECT_EQ(ToolRules(), 0);
}

// The first IO to a server waits for the connection (its handshake crosses
// a link that holds every byte 5 ms): a traced IO shows that wait as a
// "connect" hop of its own, inside the rpc; the next IO, on the
// connection made, has none.
TEST_F(ServerTest, AWaitForAConnectionIsItsOwnHop) {
  ServerProcess* s1 = StartServer("S1", r1_.path());
  DelayProxy slow_link(s1->port(), std::chrono::milliseconds(5));
  WriteWholeFile(r1_ / "f", "abcd");
  IoThreads threads(1);
  RemoteEndpoint::Options o;
  o.address = slow_link.address();
  o.secret = kSecret;
  auto ep = RemoteEndpoint::Create(&threads, o);
  ASSERT_TRUE(ep.ok()) << ep.status();
  sroute::EmbeddedHost host("probe");
  ASSERT_TRUE(host.AddEndpoint("S1", *ep).ok());
  auto traced_read = [&] {
    Io io;
    char buf[4];
    io.header = {"t", "", Op::kRead, "//S1/f", 0, 4};
    io.read_buffer = std::span<char>(buf, 4);
    io.trace = std::make_shared<Trace>();
    std::promise<void> done;
    io.set_completion([&](Io&) { done.set_value(); });
    host.sswitch().Route(&io);
    done.get_future().wait();
    EXPECT_TRUE(io.status.ok()) << io.status;
    return io.trace->Hops();
  };
  const std::vector<TraceHop> first = traced_read();
  std::map<std::string, const TraceHop*> by_kind;
  for (const TraceHop& h : first) {
    if (h.depth == 0) by_kind[h.kind] = &h;
  }
  ASSERT_TRUE(by_kind.contains("connect"));
  ASSERT_TRUE(by_kind.contains("rpc"));
  const TraceHop& connect = *by_kind["connect"];
  const TraceHop& rpc = *by_kind["rpc"];
  EXPECT_EQ(connect.next, slow_link.address());
  EXPECT_EQ(connect.start_ns, rpc.start_ns);
  EXPECT_LE(connect.end_ns, rpc.end_ns);
  // The handshake's two messages to the server over the slow link (5 ms
  // each), at least.
  EXPECT_GE(connect.end_ns - connect.start_ns, 10'000'000u);
  for (const TraceHop& h : traced_read()) EXPECT_NE(h.kind, "connect");
}

// Keeps `depth` 4 KiB reads of `file` in flight from a host of the test
// process (one thread a read), as tenants that saturate a server would.
class ReadLoad {
 public:
  ReadLoad(SSwitch* sswitch, std::string file, uint64_t file_size, int depth) {
    for (int i = 0; i < depth; ++i) {
      threads_.emplace_back([this, sswitch, file, file_size, i] {
        std::vector<char> buf(4096);
        std::mt19937_64 rng(i);
        while (!stop_) {
          Io io;
          io.header = {
              "load", "", Op::kRead, file, rng() % (file_size / 4096) * 4096,
              4096};
          io.read_buffer = std::span<char>(buf.data(), buf.size());
          std::promise<void> done;
          io.set_completion([&](Io&) { done.set_value(); });
          sswitch->Route(&io);
          done.get_future().wait();
          if (!io.status.ok()) ++errors_;
        }
      });
    }
  }
  ~ReadLoad() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
  }
  uint64_t errors() const { return errors_; }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> errors_{0};
  std::vector<std::thread> threads_;
};

// A server with one io thread, read by one tenant and then by 64 at once:
// the reads the sampled one waits behind show as the server's queue
// segment, not as the device's (the read itself costs what it did) and
// not as the network's.
TEST_F(TraceToolTest, ASaturatedServerRaisesItsQueueNotTheDevice) {
  ServerProcess* s1 = StartServer("S1", r1_.path(), {"--io-threads", "1"});
  ASSERT_EQ(mkdir((r1_ / "d").c_str(), 0755), 0);
  constexpr uint64_t kSize = 1 << 20;
  WriteWholeFile(r1_ / "d/big", std::string(kSize, 'b'));
  IoThreads threads(1);
  RemoteEndpoint::Options o;
  o.address = s1->address();
  o.secret = kSecret;
  auto ep = RemoteEndpoint::Create(&threads, o);
  ASSERT_TRUE(ep.ok()) << ep.status();
  sroute::EmbeddedHost host("load");
  ASSERT_TRUE(host.AddEndpoint("S1", *ep).ok());
  // Own times (avg ns) of S1's queue and of its read of the file.
  auto segments = [&](int depth) {
    ReadLoad load(&host.sswitch(), "//S1/d/big", kSize, depth);
    auto [rc, out] = RunCommand(std::string(SROUTE_TRACE_BINARY) + " --host " +
                                s1->address() + " --secret-file " + secret_ +
                                " --rate 0.1 --count 300 --duration 30 "
                                "--interval-ms 100 --json //S1/d/big");
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(PathOf(out).ios(), 300u) << out;
    EXPECT_EQ(load.errors(), 0u);
    const std::pair<double, double> own{OwnAvgNs(out, "S1", "queue"),
                                        OwnAvgNs(out, "S1", "default")};
    EXPECT_GE(own.first, 0) << out;
    EXPECT_GE(own.second, 0) << out;
    return own;
  };
  const auto [idle_queue, idle_device] = segments(1);
  const auto [busy_queue, busy_device] = segments(64);
  // The queue grows by far more than the device: a read waits behind the
  // reads that arrived with it (tens of them), while each read's own
  // time moves by a share of one (two cores shared by all three
  // processes).
  EXPECT_GT(busy_queue - idle_queue,
            4 * std::max(0.0, busy_device - idle_device))
      << "queue " << idle_queue << " -> " << busy_queue << ", device "
      << idle_device << " -> " << busy_device;
  EXPECT_GT(busy_queue, 3 * idle_queue)
      << "queue " << idle_queue << " -> " << busy_queue;
}

// --slow: the writes held 5 ms in S2's stage are slow IOs over a 1 ms
// threshold; a write to a stopped server is still in flight, and the tool
// says where it waits.
TEST_F(TraceToolTest, SlowShowsSlowIosAndWhereAStuckOneWaits) {
  SetUpPath();
  auto [rc, out] = Trace("--slow --threshold-ms 1");
  ASSERT_EQ(rc, 0) << out;
  for (int i = 0; i < 5; ++i) PwriteAll(mnt_ / "fwd/x", "slow", 0);
  std::tie(rc, out) = Trace("--slow");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("write //home/fwd/x"), std::string::npos) << out;
  const int fd = open((mnt_ / "fwd/x").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(kill(s1_->pid(), SIGSTOP), 0);
  ASSERT_TRUE(::sroute::testing::WaitAllThreadsStopped(s1_->pid()));
  std::thread stuck([&] { EXPECT_EQ(pwrite(fd, "stuck", 5, 0), 5); });
  std::tie(rc, out) = Trace(
      "--slow --threshold-ms 50 --duration 1 "
      "--interval-ms 200");
  kill(s1_->pid(), SIGCONT);
  stuck.join();
  close(fd);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(
      out.find("still in flight at endpoint S1 (" + s1_->address() + "): "),
      std::string::npos)
      << out;
  EXPECT_NE(out.find("write //home/fwd/x [0, +5)"), std::string::npos) << out;
}

// A 5 ms delay on the link to the server (a relay that holds every byte
// to the server; `tc netem` is not available everywhere) raises the rpc
// hop's own time by 5 ms and leaves the server's segments as they were.
TEST_F(TraceToolTest, ADelayedLinkRaisesOnlyTheNetworkSegment) {
  ServerProcess* s1 = StartServer("S1", r1_.path());
  DelayProxy slow_link(s1->port(), std::chrono::milliseconds(5));
  ASSERT_EQ(mkdir((r1_ / "d").c_str(), 0755), 0);
  for (const char* dir : {"fast", "slow"}) {
    ASSERT_EQ(mkdir((home_ / dir).c_str(), 0755), 0);
  }
  WriteWholeFile(r1_ / "d/fast", "");
  WriteWholeFile(r1_ / "d/slow", "");
  Mount({"S1=" + s1->address(), "P=" + slow_link.address()},
        "<*, *, //home/fast/*> -> <IO, //S1/d/*>\n"
        "<*, *, //home/slow/*> -> <IO, //P/d/*>\n");
  // Own times (avg ns) of the rpc hop and the server's write to its file.
  auto segments = [&](const std::string& name) {
    Writer writer(mnt_ / (name + "/" + name));
    auto [rc, out] =
        Trace("--op w --count 40 --json //home/" + name + "/" + name);
    EXPECT_EQ(rc, 0) << out;
    const std::pair<double, double> own{OwnAvgNs(out, "fuse-test", "rpc"),
                                        OwnAvgNs(out, "S1", "default")};
    EXPECT_GE(own.first, 0) << out;
    EXPECT_GE(own.second, 0) << out;
    return own;
  };
  const auto [fast_rpc, fast_server] = segments("fast");
  const auto [slow_rpc, slow_server] = segments("slow");
  // 5 ms more on the link, within 1 ms under / 3 ms over (scheduling of
  // the relay's threads on a busy machine adds, never removes).
  EXPECT_GE(slow_rpc - fast_rpc, 4e6) << fast_rpc << " " << slow_rpc;
  EXPECT_LE(slow_rpc - fast_rpc, 8e6) << fast_rpc << " " << slow_rpc;
  // The server's own time does not move by anything like it.
  EXPECT_LT(std::abs(slow_server - fast_server), 1e6)
      << fast_server << " " << slow_server;
}
}  // namespace
}  // namespace sroute

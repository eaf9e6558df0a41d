// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: independent cases on one fixture (a mounted volume),
// which each file of a split would repeat.
// sroute-fuse mounted for real: basic file system behaviour and routing
// between local endpoints.
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/cli_json.pb.h"
#include "tests/util/ctl_json.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/process_threads.h"
#include "tests/util/run_command.h"
#include "tests/util/sanitized.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::DescriptorFlags;
using ::sroute::testing::Eventually;
using ::sroute::testing::kSanitized;
using ::sroute::testing::MountedVolume;
using ::sroute::testing::ProcessCpuSeconds;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunCommand;
using ::sroute::testing::StatField;
using ::sroute::testing::TempDir;
using ::sroute::testing::ThreadFiles;
using ::sroute::testing::ThreadIdsNamed;
using ::sroute::testing::ThreadIdsOf;
using ::sroute::testing::ThreadNices;
using ::sroute::testing::WaitAllThreadsStopped;
using ::sroute::testing::WaitForThreadFiles;
using ::sroute::testing::WriteWholeFile;
using ::testing::AllOf;
using ::testing::Each;
using ::testing::IsEmpty;
using ::testing::Not;

std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = readdir(d)) names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

class FuseVolumeTest : public ::testing::Test {
 protected:
  // Mounts with `rules` (written to a file) and endpoint "other".
  void Mount(const std::string& rules = "",
             std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--backing", backing_.path(), "--endpoint",
                                     "other=" + other_.path()};
    if (!rules.empty()) {
      WriteWholeFile(rules_dir_ / "test.rules", rules);
      args.push_back("--rules");
      args.push_back(rules_dir_ / "test.rules");
    }
    args.insert(args.end(), extra.begin(), extra.end());
    volume_ =
        std::make_unique<MountedVolume>(SROUTE_FUSE_BINARY, mnt_.path(), args);
    ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  }
  void TearDown() override { volume_.reset(); }

  TempDir backing_, other_, mnt_, rules_dir_;
  std::unique_ptr<MountedVolume> volume_;
};

TEST_F(FuseVolumeTest, FilesDirectoriesAndLinksPassThrough) {
  Mount();
  const std::string m = mnt_.path();
  WriteWholeFile(m + "/a.txt", "hello");
  EXPECT_EQ(ReadWholeFile(m + "/a.txt"), "hello");
  EXPECT_EQ(ReadWholeFile(backing_ / "a.txt"), "hello");
  ASSERT_EQ(mkdir((m + "/d").c_str(), 0750), 0);
  struct stat st {};
  ASSERT_EQ(stat((backing_ / "d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  WriteWholeFile(m + "/d/x", "x");
  ASSERT_EQ(rename((m + "/d/x").c_str(), (m + "/d/y").c_str()), 0);
  EXPECT_EQ(List(m + "/d"), (std::vector<std::string>{".", "..", "y"}));
  ASSERT_EQ(symlink("a.txt", (m + "/l").c_str()), 0);
  EXPECT_EQ(ReadWholeFile(m + "/l"), "hello");
  ASSERT_EQ(link((m + "/a.txt").c_str(), (m + "/h").c_str()), 0);
  ASSERT_EQ(stat((m + "/a.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2u);
  ASSERT_EQ(truncate((m + "/a.txt").c_str(), 2), 0);
  EXPECT_EQ(ReadWholeFile(m + "/h"), "he");
  ASSERT_EQ(unlink((m + "/h").c_str()), 0);
  EXPECT_EQ(rmdir((m + "/d").c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
  EXPECT_EQ(open((m + "/missing").c_str(), O_RDONLY), -1);
  EXPECT_EQ(errno, ENOENT);
}

// A directory removed while open and made again under its name (ext4
// gives the new one the removed one's inode number at once) is a usable
// directory, not the removed one: the kernel keeps that one dead (every
// lookup and create in it fails with ENOENT) until its last holder lets go.
TEST_F(FuseVolumeTest, ADirectoryMadeAgainWhileTheRemovedOneIsOpenIsUsable) {
  Mount();
  const std::string d = mnt_ / "d";
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(mkdir(d.c_str(), 0755), 0);
    const int fd = open(d.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(rmdir(d.c_str()), 0);
    ASSERT_EQ(mkdir(d.c_str(), 0711), 0);
    EXPECT_EQ(mkdir((d + "/s").c_str(), 0755), 0) << strerror(errno);
    const int f = open((d + "/f").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    EXPECT_GE(f, 0) << strerror(errno);
    if (f >= 0) close(f);
    EXPECT_EQ(List(d), (std::vector<std::string>{".", "..", "f", "s"}));
    close(fd);
    unlink((d + "/f").c_str());
    rmdir((d + "/s").c_str());
    ASSERT_EQ(rmdir(d.c_str()), 0);
  }
}

TEST_F(FuseVolumeTest, UnlinkedOpenFileStaysReadableUntilClosed) {
  Mount("", {"--kernel-cache", "off"});
  WriteWholeFile(mnt_ / "tmp", "still here");
  int fd = open((mnt_ / "tmp").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(unlink((mnt_ / "tmp").c_str()), 0);
  struct stat st {};
  EXPECT_EQ(stat((mnt_ / "tmp").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  ASSERT_EQ(fstat(fd, &st), 0);
  EXPECT_EQ(st.st_nlink, 0u);
  char buf[32] = {};
  EXPECT_EQ(pread(fd, buf, sizeof(buf), 0), 10);
  EXPECT_EQ(std::string(buf), "still here");
  EXPECT_EQ(pwrite(fd, "STILL", 5, 0), 5);
  EXPECT_EQ(pread(fd, buf, 10, 0), 10);
  EXPECT_EQ(std::string(buf, 10), "STILL here");
  for (const std::string& name : List(mnt_.path())) EXPECT_NE(name, "tmp");
  close(fd);
  // After the last close (the kernel's release comes on its own time) the
  // hidden copy is gone too.
  EXPECT_TRUE(Eventually([&] {
    return List(backing_ / ".sroute/unlinked") ==
           std::vector<std::string>{".", ".."};
  })) << List(backing_ / ".sroute/unlinked").size();
}

TEST_F(FuseVolumeTest, ReservedFolderIsInvisibleAndClosed) {
  std::filesystem::create_directories(backing_ / ".sroute/detours");
  Mount();
  const std::string m = mnt_.path();
  for (const std::string& name : List(m)) EXPECT_NE(name, ".sroute");
  struct stat st {};
  EXPECT_EQ(stat((m + "/.sroute").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(mkdir((m + "/.sroute").c_str(), 0755), -1);
  EXPECT_EQ(errno, EACCES);
}

TEST_F(FuseVolumeTest, FileRoutedToAnotherEndpoint) {
  std::filesystem::create_directories(other_ / "routed");
  WriteWholeFile(backing_ / "routed/f", "");
  WriteWholeFile(other_ / "routed/f", "");
  Mount("<*, r|w, //home/routed/*> -> <IO, //other/routed/*>\n");
  const std::string m = mnt_.path();
  {
    int fd = open((m + "/routed/f").c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(pwrite(fd, "moved", 5, 0), 5);
    close(fd);
  }
  EXPECT_EQ(ReadWholeFile(other_ / "routed/f"), "moved");
  EXPECT_EQ(ReadWholeFile(backing_ / "routed/f"), "");
  EXPECT_EQ(ReadWholeFile(m + "/routed/f"), "moved");
}

TEST_F(FuseVolumeTest, RoutedFilesAreListedOnceWithParentsMadeAtTheTarget) {
  std::filesystem::create_directories(backing_ / "proj/src");
  WriteWholeFile(backing_ / "proj/README", "home");
  // A stale copy at home of a file whose route now points elsewhere.
  WriteWholeFile(backing_ / "proj/src/main.c", "stale");
  Mount("<*, *, //home/proj/src/*> -> <IO, //other/mirror/src/*>\n");
  const std::string m = mnt_.path();
  // The target has no mirror/src yet: the create makes it.
  WriteWholeFile(m + "/proj/src/main.c", "routed");
  WriteWholeFile(m + "/proj/src/util.c", "util");
  EXPECT_EQ(ReadWholeFile(other_ / "mirror/src/main.c"), "routed");
  EXPECT_EQ(ReadWholeFile(other_ / "mirror/src/util.c"), "util");
  EXPECT_EQ(ReadWholeFile(backing_ / "proj/src/main.c"), "stale");
  EXPECT_EQ(List(m + "/proj/src"),
            (std::vector<std::string>{".", "..", "main.c", "util.c"}));
  EXPECT_EQ(ReadWholeFile(m + "/proj/src/main.c"), "routed");
  EXPECT_EQ(List(m + "/proj"),
            (std::vector<std::string>{".", "..", "README", "src"}));
}

TEST_F(FuseVolumeTest, RenameAcrossEndpointsIsExdev) {
  std::filesystem::create_directories(other_ / "routed");
  std::filesystem::create_directories(backing_ / "routed");
  WriteWholeFile(backing_ / "routed/f", "");
  WriteWholeFile(other_ / "routed/f", "data");
  Mount("<*, *, //home/routed/*> -> <IO, //other/routed/*>\n");
  const std::string m = mnt_.path();
  EXPECT_EQ(rename((m + "/routed/f").c_str(), (m + "/top").c_str()), -1);
  EXPECT_EQ(errno, EXDEV);
  ASSERT_EQ(rename((m + "/routed/f").c_str(), (m + "/routed/g").c_str()), 0);
  EXPECT_EQ(ReadWholeFile(other_ / "routed/g"), "data");
  EXPECT_EQ(ReadWholeFile(m + "/routed/g"), "data");
}

TEST_F(FuseVolumeTest, ByteRangeDetourReadsBackWhatWasWritten) {
  WriteWholeFile(backing_ / "f", "");
  WriteWholeFile(other_ / "f", "");
  Mount("<*, *, //home/f[4K:8K]> -> <IO, //other/f>\n",
        {"--kernel-cache", "off"});
  std::string data(12288, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 13);
  const std::string f = mnt_ / "f";
  int fd = open(f.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), 0),
            static_cast<ssize_t>(data.size()));
  std::string back(data.size(), '\0');
  ASSERT_EQ(pread(fd, back.data(), back.size(), 0),
            static_cast<ssize_t>(back.size()));
  close(fd);
  EXPECT_EQ(back, data);
  const std::string at_other = ReadWholeFile(other_ / "f");
  ASSERT_EQ(at_other.size(), 8192u);
  EXPECT_EQ(at_other.substr(4096), data.substr(4096, 4096));
  EXPECT_EQ(ReadWholeFile(backing_ / "f").substr(4096, 4096),
            std::string(4096, '\0'));
}

TEST_F(FuseVolumeTest, ScatterWritesAreIdenticalOnTwoEndpoints) {
  WriteWholeFile(backing_ / "s", "");
  WriteWholeFile(other_ / "s", "");
  Mount("<*, w, //home/s> -> <IO, //home/s>, <IO, //other/s>\n");
  std::string data(1 << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i % 241);
  int fd = open((mnt_ / "s").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, data.data(), data.size(), 0),
            static_cast<ssize_t>(data.size()));
  close(fd);
  EXPECT_EQ(ReadWholeFile(backing_ / "s"), data);
  EXPECT_EQ(ReadWholeFile(other_ / "s"), data);
}

TEST_F(FuseVolumeTest, BadRulesFileFailsWithFileLineColumn) {
  WriteWholeFile(rules_dir_ / "bad.rules",
                 "\n<*, q, //home/x> -> <IO, //other/x>\n");
  const auto [rc, out] = RunCommand(
      std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() + " -f --backing " +
      backing_.path() + " --rules " + (rules_dir_ / "bad.rules"));
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("bad.rules:2:5: unknown op 'q'"), std::string::npos)
      << out;
}

TEST_F(FuseVolumeTest, ConfigFileDescribesTheWholeVolume) {
  std::filesystem::create_directories(other_ / "cfg");
  WriteWholeFile(backing_ / "cfg/a", "");
  WriteWholeFile(other_ / "cfg/a", "");
  WriteWholeFile(rules_dir_ / "volume.rules",
                 "<*, r|w, //home/cfg/a> -> <IO, //other/cfg/a>\n");
  WriteWholeFile(
      rules_dir_ / "volume.conf",
      "# a comment\n"
      "backing: \"" +
          backing_.path() +
          "\"\n"
          "endpoint { name: \"other\" dir: \"" +
          other_.path() +
          "\" }\n"
          "tenant { name: \"alice\" uid: 4101 }\n"
          "rules_file: \"volume.rules\"\n"
          "rule: \"<alice, w, //home/cfg/b> -> <IO, //other/cfg/b>\"\n"
          "kernel_cache: \"off\"\n"
          "threads: 3\n"
          "nice: 3\n");
  volume_ = std::make_unique<MountedVolume>(
      SROUTE_FUSE_BINARY, mnt_.path(),
      std::vector<std::string>{"--config", rules_dir_ / "volume.conf"});
  ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  int fd = open((mnt_ / "cfg/a").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "configured", 10, 0), 10);
  close(fd);
  EXPECT_EQ(ReadWholeFile(other_ / "cfg/a"), "configured");
  EXPECT_EQ(ReadWholeFile(backing_ / "cfg/a"), "");
  // Workers name themselves once they run, and a thread a worker starts
  // (the io_uring queues, after INIT) bears the worker's name until it is
  // renamed: three, once the names settle.
  auto workers = [](const std::vector<std::string>& names) {
    return std::count(names.begin(), names.end(), "fuse-worker\n");
  };
  EXPECT_TRUE(WaitForThreadFiles(
      volume_->pid(), "comm", [&](const auto& n) { return workers(n) == 3; }))
      << workers(ThreadFiles(volume_->pid(), "comm")) << " workers";
  EXPECT_THAT(ThreadNices(volume_->pid()), AllOf(Not(IsEmpty()), Each(3)));
}

TEST_F(FuseVolumeTest, DaemonThreadsRunAheadOfTheirCallers) {
  // By default every thread runs at nice -10, so a request is served as
  // soon as it arrives, not after its caller's time slice.
  Mount();
  WriteWholeFile(mnt_ / "n", "x");
  ASSERT_TRUE(WaitForThreadFiles(volume_->pid(), "comm", [](const auto& n) {
    return std::count(n.begin(), n.end(), "fuse-worker\n") >= 2;
  }));
  EXPECT_THAT(ThreadNices(volume_->pid()), AllOf(Not(IsEmpty()), Each(-10)));
  volume_.reset();
  // --nice overrides it (and a config file's nice:).
  WriteWholeFile(rules_dir_ / "nice.conf",
                 "backing: \"" + backing_.path() + "\"\nnice: 7\n");
  volume_ = std::make_unique<MountedVolume>(
      SROUTE_FUSE_BINARY, mnt_.path(),
      std::vector<std::string>{"--config", rules_dir_ / "nice.conf", "--nice",
                               "0"});
  ASSERT_TRUE(volume_->ok());
  WriteWholeFile(mnt_ / "n", "y");
  EXPECT_THAT(ThreadNices(volume_->pid()), AllOf(Not(IsEmpty()), Each(0)));
  volume_.reset();
  // Out of range: refused with a clear error, from a flag or the file.
  auto [rc, out] =
      RunCommand(std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() +
                 " --backing " + backing_.path() + " --nice 20");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("--nice"), std::string::npos) << out;
  WriteWholeFile(rules_dir_ / "bad-nice.conf",
                 "backing: \"" + backing_.path() + "\"\nnice: -21\n");
  std::tie(rc, out) =
      RunCommand(std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() +
                 " --config " + (rules_dir_ / "bad-nice.conf"));
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("nice: must be in -20..19, not -21"), std::string::npos)
      << out;
}

// Under -d every request goes through libfuse (so that it can print it),
// reads and writes included: their libfuse handlers route like the raw ones.
TEST_F(FuseVolumeTest, DebugModeReadsAndWritesThroughLibfuse) {
  WriteWholeFile(backing_ / "h", "0123456789");
  Mount("<*, r|w, //home/m> -> <IO, //other/m>\n",
        {"-d", "--kernel-cache", "off"});
  int fd = open((mnt_ / "h").c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(pwrite(fd, "ab", 2, 3), 2);
  char buf[16] = {};
  EXPECT_EQ(pread(fd, buf, sizeof(buf), 2), 8);
  EXPECT_EQ(std::string(buf, 8), "2ab56789");
  close(fd);
  EXPECT_EQ(ReadWholeFile(backing_ / "h"), "012ab56789");
  // A routed file: its bytes land at the other endpoint.
  fd = open((mnt_ / "m").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  EXPECT_EQ(pwrite(fd, "routed", 6, 0), 6);
  EXPECT_EQ(pread(fd, buf, sizeof(buf), 0), 6);
  EXPECT_EQ(std::string(buf, 6), "routed");
  close(fd);
  EXPECT_EQ(ReadWholeFile(other_ / "m"), "routed");
}

TEST_F(FuseVolumeTest, WorkersSleepByDefaultAndPollGivingWayToBusyCallers) {
  // By default the workers sleep in read(2) on the FUSE descriptor; with
  // --poll-us they poll for requests (the descriptor is non-blocking; they
  // sleep in epoll). (The /dev/fuse transport's workers.)
  WriteWholeFile(backing_ / "p", "0123456789");
  Mount("", {"--kernel-cache", "off", "--io-uring=off"});
  EXPECT_EQ(ReadWholeFile(mnt_ / "p"), "0123456789");
  const int flags = DescriptorFlags(volume_->pid(), "/dev/fuse");
  ASSERT_GE(flags, 0);
  EXPECT_EQ(flags & O_NONBLOCK, 0);
  volume_.reset();
  Mount("", {"--kernel-cache", "off", "--poll-us", "50", "--io-uring=off"});
  EXPECT_EQ(ReadWholeFile(mnt_ / "p"), "0123456789");
  EXPECT_NE(DescriptorFlags(volume_->pid(), "/dev/fuse") & O_NONBLOCK, 0);
  volume_.reset();

  // A spinning worker must not take its CPU from the callers. A caller's
  // request every 5 ms keeps a long poll window open, so a worker spins.
  Mount("", {"--kernel-cache", "off", "--poll-us", "100000", "--io-uring=off"});
  EXPECT_EQ(ReadWholeFile(mnt_ / "p"), "0123456789");
  std::atomic<bool> stop{false};
  std::thread caller([&] {
    const int fd = open((mnt_ / "p").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    char c;
    while (!stop.load()) {
      ASSERT_EQ(pread(fd, &c, 1, 3), 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    close(fd);
  });
  // With the daemon and a busy thread on one CPU, the daemon uses a small
  // share of it (a worker spinning at its own priority without yielding
  // takes nearly all of it).
  cpu_set_t one_cpu;
  CPU_ZERO(&one_cpu);
  CPU_SET(0, &one_cpu);
  for (const std::string& tid : ThreadIdsOf(volume_->pid())) {
    EXPECT_EQ(sched_setaffinity(std::stoi(tid), sizeof(one_cpu), &one_cpu), 0)
        << std::strerror(errno);
  }
  std::thread busy([&] {
    pthread_setaffinity_np(pthread_self(), sizeof(one_cpu), &one_cpu);
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double cpu_before = ProcessCpuSeconds(volume_->pid());
  // And it mostly sleeps rather than waiting its turn to spin: a spinner
  // that kept on is runnable ('R') at nearly every look (it may then get
  // so little CPU under EEVDF that the CPU check alone would miss it). A
  // worker woken by the caller's request also shows 'R' while it waits
  // behind the busy thread, at a minority of looks.
  int runnable = 0;
  for (int i = 0; i < 100; ++i) {
    const auto stats = ThreadFiles(volume_->pid(), "stat");
    runnable += std::any_of(stats.begin(), stats.end(), [](const auto& line) {
      return StatField(line, 3) == "R";
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double cpu_after = ProcessCpuSeconds(volume_->pid());
  stop = true;
  busy.join();
  caller.join();
  ASSERT_GE(cpu_before, 0) << "the daemon is gone";
  ASSERT_GE(cpu_after, 0) << "the daemon is gone";
  EXPECT_LT(cpu_after - cpu_before, 0.25) << "seconds of CPU in one second";
  EXPECT_LT(runnable, 80) << "looks of 100 with a daemon thread runnable";
}

TEST_F(FuseVolumeTest, MountHelperTakesFstabStyleArguments) {
  // As mount(8) calls /sbin/mount.fuse.sroute for an fstab line
  //   BACKING MNT fuse.sroute defaults,kernel_cache=off,endpoint=other=DIR,...
  WriteWholeFile(backing_ / "m", "");
  WriteWholeFile(other_ / "m", "");
  WriteWholeFile(rules_dir_ / "m.rules",
                 "<*, r|w, //home/m> -> <IO, //other/m>\n");
  const std::string helper =
      std::filesystem::path(SROUTE_FUSE_BINARY).parent_path() /
      "mount.fuse.sroute";
  auto [rc, out] = RunCommand(
      helper + " " + backing_.path() + " " + mnt_.path() +
      " -o defaults,_netdev,kernel_cache=off,endpoint=other=" + other_.path() +
      ",rules=" + (rules_dir_ / "m.rules") +
      ",threads=2,poll_us=0,nice=-5,noatime");
  ASSERT_EQ(rc, 0) << out;
  WriteWholeFile(mnt_ / "m", "via fstab");
  EXPECT_EQ(ReadWholeFile(other_ / "m"), "via fstab");
  // Unmounting ends the daemon (it went to the background).
  EXPECT_EQ(RunCommand("fusermount3 -u " + mnt_.path()).first, 0);
  // An option neither sroute's nor FUSE's is an error that names it (it
  // used to reach FUSE, which failed without saying why), and so is a rule,
  // whose commas a mount option cannot hold.
  std::tie(rc, out) = RunCommand(helper + " " + backing_.path() + " " +
                                 mnt_.path() + " -o defaults,kernel_cach=off");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("unknown option 'kernel_cach=off'"), std::string::npos)
      << out;
  std::tie(rc, out) = RunCommand(helper + " " + backing_.path() + " " +
                                 mnt_.path() + " -o rule=x");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("rules=FILE"), std::string::npos) << out;
}

TEST_F(FuseVolumeTest, InTheBackgroundStartReturnsOnceServingOrWithTheError) {
  // Without -f the command returns only once the volume serves: the first
  // write right after it lands.
  auto [rc, out] = RunCommand(std::string(SROUTE_FUSE_BINARY) + " " +
                              mnt_.path() + " --backing " + backing_.path());
  ASSERT_EQ(rc, 0) << out;
  WriteWholeFile(mnt_ / "first", "right away");
  EXPECT_EQ(ReadWholeFile(backing_ / "first"), "right away");
  EXPECT_EQ(RunCommand("fusermount3 -u " + mnt_.path()).first, 0);
  // An error found after the daemon forked still reaches the command's
  // output and status.
  WriteWholeFile(rules_dir_ / "bad.rules",
                 "<*, w, //home/x> -> <IO, //nowhere/x>\n");
  std::tie(rc, out) = RunCommand(std::string(SROUTE_FUSE_BINARY) + " " +
                                 mnt_.path() + " --backing " + backing_.path() +
                                 " --rules " + (rules_dir_ / "bad.rules"));
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("nowhere"), std::string::npos) << out;
}

TEST_F(FuseVolumeTest, BadConfigFileNamesLineAndColumn) {
  WriteWholeFile(rules_dir_ / "bad.conf",
                 "backing: \"/tmp\"\nendpoint { nam: \"x\" }\n");
  auto [rc, out] =
      RunCommand(std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() +
                 " -f --config " + (rules_dir_ / "bad.conf"));
  EXPECT_NE(rc, 0);
  // Protobuf's parser points just past the unknown field's name.
  EXPECT_NE(out.find("bad.conf:2:15: "), std::string::npos) << out;
  EXPECT_NE(out.find("no field named \"nam\""), std::string::npos) << out;
  WriteWholeFile(rules_dir_ / "bad2.conf",
                 "backing: \"/tmp\"\nkernel_cache: \"sometimes\"\n");
  std::tie(rc, out) =
      RunCommand(std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() +
                 " -f --config " + (rules_dir_ / "bad2.conf"));
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("kernel_cache must be \"off\" or \"auto\""),
            std::string::npos)
      << out;
}

TEST_F(FuseVolumeTest, MissingBackingDirIsAClearError) {
  const auto [rc, out] =
      RunCommand(std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() +
                 " -f --backing /nonexistent/sroute");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("backing directory /nonexistent/sroute"),
            std::string::npos)
      << out;
}

TEST_F(FuseVolumeTest, KilledDaemonGivesEnotconnAndCanBeRemounted) {
  Mount();
  WriteWholeFile(mnt_ / "kept", "acknowledged");
  volume_->Kill();
  struct stat st {};
  EXPECT_EQ(stat((mnt_ / "kept").c_str(), &st), -1);
  // On io_uring queues (the default) a request that comes while the kernel
  // tears the dead daemon's rings down ends with ECONNABORTED; then, as on
  // /dev/fuse, every one with ENOTCONN.
  EXPECT_TRUE(errno == ENOTCONN || errno == ECONNABORTED) << strerror(errno);
  for (int i = 0; i < 1000 && errno == ECONNABORTED; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(stat((mnt_ / "kept").c_str(), &st), -1);
  }
  EXPECT_EQ(errno, ENOTCONN);
  volume_.reset();  // lazy unmount of the dead mount
  Mount();
  EXPECT_EQ(ReadWholeFile(mnt_ / "kept"), "acknowledged");
}

// A small tmpfs mounted on `dir` for the life of the object (full disks and
// read-only backings).
class Tmpfs {
 public:
  Tmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    ok_ = mount("tmpfs", dir.c_str(), "tmpfs", 0,
                ("size=" + size + ",mode=0755").c_str()) == 0;
  }
  ~Tmpfs() {
    if (ok_) umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok() const { return ok_; }
  bool RemountReadOnly() {
    return mount(nullptr, dir_.c_str(), nullptr, MS_REMOUNT | MS_RDONLY,
                 nullptr) == 0;
  }

 private:
  std::string dir_;
  bool ok_ = false;
};

// Writes `block` at the end of `fd` until the disk is full: returns the
// bytes every acknowledged write(2) holds, and sets *err to its errno.
std::string FillUntilError(int fd, const std::string& block, int* err) {
  std::string acked;
  while (true) {
    const ssize_t n = write(fd, block.data(), block.size());
    if (n < 0) {
      *err = errno;
      return acked;
    }
    acked.append(block, 0, static_cast<size_t>(n));
    if (acked.size() > (64u << 20)) {
      *err = 0;  // never full: the test will say so
      return acked;
    }
  }
}

class FuseFailureTest : public FuseVolumeTest,
                        public ::testing::WithParamInterface<const char*> {};

TEST_P(FuseFailureTest, FullDiskGivesEnospcAndKeepsAcknowledgedWrites) {
  Tmpfs fs(backing_.path(), "2m");
  ASSERT_TRUE(fs.ok()) << strerror(errno);
  Mount("", {"--kernel-cache", GetParam()});
  std::string block(64 * 1024, '\0');
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 7);
  const std::string path = mnt_ / "big";
  int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0) << strerror(errno);
  int err = 0;
  const std::string acked = FillUntilError(fd, block, &err);
  EXPECT_EQ(err, ENOSPC);
  EXPECT_EQ(close(fd), 0);
  EXPECT_GT(acked.size(), 1u << 20);
  // Every acknowledged byte is there, through the mount and at home.
  EXPECT_TRUE(ReadWholeFile(path) == acked);
  EXPECT_TRUE(ReadWholeFile(backing_ / "big") == acked);
  // Creating more fails cleanly too, and freeing space makes room again.
  fd = open((mnt_ / "more").c_str(), O_CREAT | O_WRONLY, 0644);
  if (fd >= 0) {
    EXPECT_EQ(write(fd, block.data(), block.size()), -1);
    EXPECT_EQ(errno, ENOSPC);
    close(fd);
  }
  ASSERT_EQ(unlink(path.c_str()), 0);
  // The kernel sends the file's release after close(2) returned, on its own
  // time: until it arrives the daemon keeps the unlinked file's data under
  // a hidden name (it may still be open), so the space comes back then.
  ASSERT_TRUE(Eventually([&] {
    struct statvfs st {};
    return statvfs(backing_.path().c_str(), &st) == 0 &&
           st.f_bavail * st.f_frsize >= 2 * block.size();
  })) << "the unlinked file's space never came back";
  WriteWholeFile(mnt_ / "after", block);
  EXPECT_TRUE(ReadWholeFile(mnt_ / "after") == block);
}

TEST_P(FuseFailureTest, ReadOnlyBackingGivesErofsAndStillReads) {
  Tmpfs fs(backing_.path(), "1m");
  ASSERT_TRUE(fs.ok()) << strerror(errno);
  WriteWholeFile(backing_ / "f", "before");
  ASSERT_EQ(mkdir((backing_ / "d").c_str(), 0755), 0);
  // (While mounted, the daemon's cached descriptors would keep the remount
  // busy; a read-only snapshot or a disk remounted on errors looks alike.)
  ASSERT_TRUE(fs.RemountReadOnly()) << strerror(errno);
  Mount("", {"--kernel-cache", GetParam()});
  EXPECT_EQ(ReadWholeFile(mnt_ / "f"), "before");
  errno = 0;
  EXPECT_EQ(open((mnt_ / "f").c_str(), O_WRONLY), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(open((mnt_ / "new").c_str(), O_CREAT | O_WRONLY, 0644), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(mkdir((mnt_ / "d2").c_str(), 0755), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(rmdir((mnt_ / "d").c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(rename((mnt_ / "f").c_str(), (mnt_ / "g").c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(truncate((mnt_ / "f").c_str(), 0), -1);
  EXPECT_EQ(errno, EROFS);
  EXPECT_EQ(ReadWholeFile(mnt_ / "f"), "before");
}

TEST_P(FuseFailureTest, RemovedBackingDirGivesErrorsNotHangs) {
  Mount("", {"--kernel-cache", GetParam()});
  WriteWholeFile(mnt_ / "f", "data");
  std::error_code ec;
  std::filesystem::remove_all(backing_.path(), ec);
  ASSERT_FALSE(ec) << ec.message();
  // Every call returns (a hang fails the test by its timeout) with an error.
  struct stat st {};
  errno = 0;
  EXPECT_EQ(open((mnt_ / "new").c_str(), O_CREAT | O_WRONLY, 0644), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_EQ(mkdir((mnt_ / "d").c_str(), 0755), -1);
  EXPECT_EQ(errno, ENOENT);
  if (std::string(GetParam()) == "off") {  // auto may answer from its cache
    EXPECT_EQ(stat((mnt_ / "f").c_str(), &st), -1);
    EXPECT_EQ(errno, ENOENT);
  }
  // The volume itself still answers and unmounts cleanly.
  EXPECT_EQ(stat(mnt_.path().c_str(), &st), 0);
  struct statvfs sv {};
  EXPECT_EQ(statvfs(mnt_.path().c_str(), &sv), 0);
  volume_.reset();
}

INSTANTIATE_TEST_SUITE_P(KernelCache, FuseFailureTest,
                         ::testing::Values("off", "auto"));

// In a forked child: writes `data` to `path` and exits 0, or 3 or 4 on
// failure.
[[noreturn]] void WriteFileAndExit(const std::string& path,
                                   const std::string& data) {
  int fd = open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  if (fd < 0) _exit(3);
  const bool ok =
      write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  close(fd);
  _exit(ok ? 0 : 4);
}

// Writes `data` to `path` from a child process running as uid:gid.
bool WriteAs(uid_t uid, gid_t gid, const std::string& path,
             const std::string& data) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(gid) != 0 || setuid(uid) != 0) _exit(2);
    WriteFileAndExit(path, data);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Appends a byte to `path` (no O_TRUNC: the write itself carries the
// kernel's kill flag) from a child running as uid:gid.
bool AppendAs(uid_t uid, gid_t gid, const std::string& path) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(gid) != 0 || setuid(uid) != 0) _exit(2);
    const int fd = open(path.c_str(), O_WRONLY | O_APPEND);
    if (fd < 0) _exit(3);
    const bool ok = write(fd, "x", 1) == 1;
    close(fd);
    _exit(ok ? 0 : 4);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A file found with nothing to clear is taken so by its next opens too (a
// user's open-write-close loop pays the clearing once, not each time), but
// a set-user-ID bit given through the volume goes on the next write, and
// one given behind its back (on the backing directory) on a write a
// second later at most.
TEST_F(FuseVolumeTest, SetidBitsGoOnWritesAcrossOpens) {
  chmod(backing_.path().c_str(), 0755);
  WriteWholeFile(backing_ / "f", "");
  const std::string f = mnt_ / "f", at_home = backing_ / "f";
  chmod(at_home.c_str(), 0666);
  Mount();
  auto setuid_bit = [&] {
    struct stat st {};
    EXPECT_EQ(stat(at_home.c_str(), &st), 0);
    return (st.st_mode & S_ISUID) != 0;
  };
  ASSERT_TRUE(AppendAs(4101, 4101, f));
  ASSERT_TRUE(AppendAs(4101, 4101, f));
  ASSERT_EQ(chmod(f.c_str(), 04766), 0);  // through the volume
  ASSERT_TRUE(setuid_bit());
  ASSERT_TRUE(AppendAs(4101, 4101, f));
  EXPECT_FALSE(setuid_bit()) << "a write kept a bit the volume set";
  ASSERT_EQ(chmod(at_home.c_str(), 04766), 0);  // behind its back
  EXPECT_TRUE(Eventually([&] {
    EXPECT_TRUE(AppendAs(4101, 4101, f));
    return !setuid_bit();
  })) << "writes kept a set-user-ID bit for good";
}

TEST_F(FuseVolumeTest, TenantsAreRoutedByTheirOwnRules) {
  std::filesystem::create_directories(backing_ / "shared");
  std::filesystem::create_directories(other_ / "shared");
  // mkdtemp makes 0700 roots; other uids must get in.
  chmod(backing_.path().c_str(), 0755);
  chmod(other_.path().c_str(), 0755);
  for (const auto& d : {backing_ / "shared", other_ / "shared"}) {
    chmod(d.c_str(), 0777);
  }
  WriteWholeFile(backing_ / "shared/a", "");
  WriteWholeFile(backing_ / "shared/b", "");
  WriteWholeFile(other_ / "shared/a", "");
  chmod((backing_ / "shared/a").c_str(), 0666);
  chmod((backing_ / "shared/b").c_str(), 0666);
  chmod((other_ / "shared/a").c_str(), 0666);
  Mount("<alice, w, //home/shared/*> -> <IO, //other/shared/*>\n",
        {"--tenant", "alice=uid:4101", "--tenant", "bob=gid:4202"});
  ASSERT_TRUE(WriteAs(4101, 4101, mnt_ / "shared/a", "from alice"));
  ASSERT_TRUE(WriteAs(4102, 4202, mnt_ / "shared/b", "from bob"));
  EXPECT_EQ(ReadWholeFile(other_ / "shared/a"), "from alice");
  // Alice's bytes are elsewhere; her home copy only grew to the same size
  // (DESIGN §3), so stat at home stays right.
  EXPECT_EQ(ReadWholeFile(backing_ / "shared/a"), std::string(10, '\0'));
  EXPECT_EQ(ReadWholeFile(backing_ / "shared/b"), "from bob");
}

// The cgroup v2 hierarchy: where it is mounted and this process's cgroup
// in it ("" for the root); nullopt if the kernel has none mounted.
std::optional<std::pair<std::string, std::string>> Cgroup2() {
  std::ifstream mounts("/proc/self/mounts");
  std::string dev, dir, type, rest;
  std::string root;
  while (mounts >> dev >> dir >> type && std::getline(mounts, rest)) {
    if (type == "cgroup2") root = dir;
  }
  if (root.empty()) return std::nullopt;
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line)) {
    if (line.starts_with("0::")) {
      std::string own = line.substr(3);
      if (own == "/") own.clear();
      return std::make_pair(root, own);
    }
  }
  return std::nullopt;
}

// Writes `data` to `path` from a child process that the parent first moves
// into cgroup directory `cgroup_dir` (none if empty).
bool WriteFromCgroup(const std::string& cgroup_dir, const std::string& path,
                     const std::string& data) {
  int go[2];
  if (pipe(go) != 0) return false;
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(2);
    WriteFileAndExit(path, data);
  }
  close(go[0]);
  bool moved = true;
  if (!cgroup_dir.empty()) {
    std::ofstream procs(cgroup_dir + "/cgroup.procs");
    procs << pid << std::flush;
    moved = procs.good();
  }
  (void)!write(go[1], "x", 1);
  close(go[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  return moved && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

TEST_F(FuseVolumeTest, TenantsByCgroupIncludeTheCgroupsBeneath) {
  const auto cgroup2 = Cgroup2();
  ASSERT_TRUE(cgroup2.has_value()) << "no cgroup v2 hierarchy mounted";
  const auto& [root, own] = *cgroup2;
  // web: a cgroup beside this process's (siblings share the parent's
  // delegation), with a child; "web-x" shares its name's prefix only.
  const std::string web = own + "/sroute-test-" + std::to_string(getpid());
  const std::string inner = web + "/inner", near = web + "-x";
  for (const auto& c : {web, inner, near}) {
    ASSERT_TRUE(std::filesystem::create_directory(root + c)) << root + c;
  }
  std::filesystem::create_directories(backing_ / "shared");
  std::filesystem::create_directories(other_ / "shared");
  for (const char* f : {"a", "b", "c"}) {
    WriteWholeFile(backing_ / ("shared/" + std::string(f)), "");
    WriteWholeFile(other_ / ("shared/" + std::string(f)), "");
  }
  // From a config file (flags are tested below).
  WriteWholeFile(rules_dir_ / "tenants.conf",
                 "tenant { name: \"web\" cgroup: \"" + web + "/\" }\n");
  Mount("<web, w, //home/shared/*> -> <IO, //other/shared/*>\n",
        {"--config", rules_dir_ / "tenants.conf"});
  EXPECT_TRUE(WriteFromCgroup(root + inner, mnt_ / "shared/a", "from web"));
  EXPECT_TRUE(WriteFromCgroup(root + near, mnt_ / "shared/b", "from web-x"));
  EXPECT_TRUE(WriteFromCgroup("", mnt_ / "shared/c", "from here"));
  EXPECT_EQ(ReadWholeFile(other_ / "shared/a"), "from web");
  EXPECT_EQ(ReadWholeFile(backing_ / "shared/b"), "from web-x");
  EXPECT_EQ(ReadWholeFile(other_ / "shared/b"), "");
  EXPECT_EQ(ReadWholeFile(backing_ / "shared/c"), "from here");
  // The children have been reaped: their cgroups are empty.
  for (const auto& c : {inner, web, near}) {
    EXPECT_EQ(rmdir((root + c).c_str()), 0) << root + c << ": " << errno;
  }
}

TEST_F(FuseVolumeTest, BadTenantSpecIsAClearError) {
  const auto [rc, out] =
      RunCommand(std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() +
                 " -f --backing " + backing_.path() + " --tenant alice=pid:3");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("tenant 'alice=pid:3': unknown id kind"),
            std::string::npos)
      << out;
  const auto [rc2, out2] = RunCommand(
      std::string(SROUTE_FUSE_BINARY) + " " + mnt_.path() + " -f --backing " +
      backing_.path() + " --tenant web=cgroup:system.slice");
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("tenant 'web=cgroup:system.slice': a cgroup path "
                      "starts with '/'"),
            std::string::npos)
      << out2;
}

long DaemonRssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Stats and reads every file of a 50000-file tree through the mount.
void VisitTree(const std::string& root, int dirs, int per_dir) {
  char buf[64];
  for (int d = 0; d < dirs; ++d) {
    for (int f = 0; f < per_dir; ++f) {
      const std::string p =
          root + "/d" + std::to_string(d) + "/f" + std::to_string(f);
      struct stat st {};
      ASSERT_EQ(stat(p.c_str(), &st), 0) << p;
      int fd = open(p.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0) << p << ": " << strerror(errno);
      ASSERT_EQ(read(fd, buf, sizeof(buf)), st.st_size);
      close(fd);
    }
  }
}

// The daemon's "fuse_inodes" gauge, read with `sroutectl stats --json`.
long KnownInodes(const std::string& control_socket) {
  auto [rc, out] = RunCommand(std::string(SROUTECTL_BINARY) + " --host unix:" +
                              control_socket + " stats --json");
  if (rc != 0) {
    ADD_FAILURE() << "sroutectl stats: " << out;
    return -1;
  }
  const proto::CtlHostStats stats =
      ::sroute::testing::FromJson<proto::CtlHostStats>(out);
  auto it = stats.gauges().find("fuse_inodes");
  if (it == stats.gauges().end()) {
    ADD_FAILURE() << "no fuse_inodes: " << out;
    return -1;
  }
  return static_cast<long>(it->second);
}

TEST_F(FuseVolumeTest, FiftyThousandFilesWithFewDescriptorsAndFlatMemory) {
  constexpr int kDirs = 50, kPerDir = 1000;
  for (int d = 0; d < kDirs; ++d) {
    const std::string dir = backing_ / ("d" + std::to_string(d));
    ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
    for (int f = 0; f < kPerDir; ++f) {
      WriteWholeFile(dir + "/f" + std::to_string(f), std::to_string(f));
    }
  }
  // The daemon inherits a limit far below the file count: it must not hold
  // a descriptor per known file.
  struct rlimit saved {};
  getrlimit(RLIMIT_NOFILE, &saved);
  struct rlimit low = saved;
  low.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const std::string control = rules_dir_ / "control.sock";
  Mount("", {"--kernel-cache", "auto", "--control", control});
  setrlimit(RLIMIT_NOFILE, &saved);
  // Makes the kernel drop its dentries and inodes, which sends FORGETs, and
  // waits until the daemon has forgotten (nearly) all of them.
  auto forget_all = [&] {
    sync();
    std::ofstream("/proc/sys/vm/drop_caches") << "2";
    long known = 0;
    for (int i = 0; i < 200; ++i) {
      known = KnownInodes(control);
      if (known >= 0 && known < 100) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_LT(known, 100) << "inodes still known after the kernel forgot";
  };
  VisitTree(mnt_.path(), kDirs, kPerDir);
  EXPECT_GT(KnownInodes(control), kDirs * kPerDir);
  forget_all();
  // Two more full passes must not grow the daemon by more than a few MiB.
  // Sanitizers keep freed memory in quarantine: there the inode gauge above
  // is the check, and the passes that only the memory check needs are left
  // out (two thirds of the test's time).
  if (kSanitized) return;
  const long rss_first = DaemonRssKb(volume_->pid());
  ASSERT_GT(rss_first, 0);
  for (int pass = 0; pass < 2; ++pass) {
    VisitTree(mnt_.path(), kDirs, kPerDir);
    forget_all();
  }
  const long rss_last = DaemonRssKb(volume_->pid());
  EXPECT_LT(rss_last, rss_first + 8 * 1024)
      << "first " << rss_first << " KiB, last " << rss_last << " KiB";
}

// Also with polling workers (--poll-us), which read /dev/fuse without
// blocking and sleep in epoll (--io-uring=off: the /dev/fuse transport).
TEST_F(FuseVolumeTest, ConcurrentWritersToOneFile) {
  for (const char* poll_us : {"0", "200"}) {
    SCOPED_TRACE(std::string("--poll-us ") + poll_us);
    WriteWholeFile(backing_ / "c", "");
    Mount("",
          {"--kernel-cache", "off", "--poll-us", poll_us, "--io-uring=off"});
    constexpr int kThreads = 4, kBlocks = 64, kBlock = 4096;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        int fd = open((mnt_ / "c").c_str(), O_WRONLY);
        ASSERT_GE(fd, 0);
        std::string block(kBlock, static_cast<char>('a' + t));
        for (int b = 0; b < kBlocks; ++b) {
          const off_t off = (static_cast<off_t>(b) * kThreads + t) * kBlock;
          ASSERT_EQ(pwrite(fd, block.data(), kBlock, off), kBlock);
        }
        close(fd);
      });
    }
    for (auto& t : threads) t.join();
    const std::string all = ReadWholeFile(mnt_ / "c");
    ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kBlocks * kBlock));
    for (size_t i = 0; i < all.size(); i += kBlock) {
      EXPECT_EQ(all[i], static_cast<char>('a' + (i / kBlock) % kThreads));
    }
    volume_.reset();
  }
}

// The daemon ends cleanly (exit 0, mount gone, data kept) on fusermount3 -u,
// SIGTERM and SIGINT, with sleeping and with polling workers.
class FuseShutdownTest
    : public FuseVolumeTest,
      public ::testing::WithParamInterface<std::tuple<std::string, int>> {};

TEST_P(FuseShutdownTest, EndsCleanly) {
  const auto& [how, poll_us] = GetParam();
  // Polling is the /dev/fuse workers'; without it, the default transport.
  Mount("", {"--poll-us", std::to_string(poll_us), "--kernel-cache", "off",
             poll_us > 0 ? "--io-uring=off" : "--io-uring=auto"});
  WriteWholeFile(mnt_ / "kept", "written before the end");
  int held = -1;
  if (how == "fusermount") {
    ASSERT_EQ(RunCommand("fusermount3 -u " + mnt_.path()).first, 0);
  } else {
    // A signal ends the daemon with a file still open (its handle is freed
    // with the volume: under ASan a leak fails the exit status).
    held = open((mnt_ / "kept").c_str(), O_RDONLY);
    ASSERT_GE(held, 0);
    const int sig = how == "SIGTERM"  ? SIGTERM
                    : how == "SIGINT" ? SIGINT
                                      : SIGHUP;
    ASSERT_EQ(kill(volume_->pid(), sig), 0);
  }
  const int status = volume_->WaitExit(std::chrono::seconds(20));
  if (held >= 0) close(held);
  ASSERT_NE(status, -1) << "the daemon did not end";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  struct stat self {
  }, parent{};
  ASSERT_EQ(stat(mnt_.path().c_str(), &self), 0);
  ASSERT_EQ(stat((mnt_ / "..").c_str(), &parent), 0);
  EXPECT_EQ(self.st_dev, parent.st_dev) << "still mounted";
  EXPECT_EQ(ReadWholeFile(backing_ / "kept"), "written before the end");
}

INSTANTIATE_TEST_SUITE_P(
    HowAndPolling, FuseShutdownTest,
    ::testing::Combine(::testing::Values("fusermount", "SIGTERM", "SIGINT",
                                         "SIGHUP"),
                       ::testing::Values(0, 200)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_poll" +
             std::to_string(std::get<1>(info.param));
    });

// True once some thread of `pid` sleeps waiting for a FUSE reply.
bool WaitForThreadInFuseRequest(pid_t pid) {
  return WaitForThreadFiles(
      pid, "wchan", [](const std::vector<std::string>& wchans) {
        return std::any_of(wchans.begin(), wchans.end(), [](const auto& w) {
          return w.find("request_wait_answer") != std::string::npos;
        });
      });
}

// The daemon serves FUSE requests with a small pool (--threads). A request
// stuck on a slow endpoint (here a local endpoint on another FUSE volume
// whose daemon is stopped) must not stop the rest of the volume: a helper
// thread takes over while every worker is stuck.
class FuseStuckRequestTest : public FuseVolumeTest,
                             public ::testing::WithParamInterface<int> {};

TEST_P(FuseStuckRequestTest, DoesNotStopTheVolume) {
  TempDir slow_backing, slow_mnt;
  MountedVolume slow(
      SROUTE_FUSE_BINARY, slow_mnt.path(),
      {"--backing", slow_backing.path(), "--kernel-cache", "off"});
  ASSERT_TRUE(slow.ok());
  WriteWholeFile(slow_mnt / "f", "slow data");
  WriteWholeFile(backing_ / "slow", "");
  Mount("<*, r, //home/slow> -> <IO, //slow/f>\n",
        {"--endpoint", "slow=" + slow_mnt.path(), "--threads", "1",
         "--kernel-cache", "off", "--poll-us", std::to_string(GetParam()),
         "--io-uring=off"});
  const int fd = open((mnt_ / "slow").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char buf[32] = {};
  ASSERT_EQ(pread(fd, buf, sizeof(buf), 0), 9);  // opens it at the endpoint

  ASSERT_EQ(kill(slow.pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitAllThreadsStopped(slow.pid()));
  std::atomic<ssize_t> stuck_read{-2};
  std::thread stuck([&] {
    char b[32] = {};
    const ssize_t n = pread(fd, b, sizeof(b), 0);
    stuck_read = n == 9 && std::string(b, 9) == "slow data" ? n : -1;
  });
  // The volume's only worker now waits on the stopped daemon.
  const bool in_flight = WaitForThreadInFuseRequest(volume_->pid());
  auto other_io = std::async(std::launch::async, [&] {
    WriteWholeFile(mnt_ / "meanwhile", "served");
    return ReadWholeFile(mnt_ / "meanwhile");
  });
  const bool served =
      other_io.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  // The helper stays while the worker is stuck: the same thread serves the
  // IO that follows.
  const auto helpers = ThreadIdsNamed(volume_->pid(), "fuse-helper");
  for (int i = 0; i < 5 && served; ++i) {
    WriteWholeFile(mnt_ / "meanwhile", "again " + std::to_string(i));
  }
  const auto helpers_after = ThreadIdsNamed(volume_->pid(), "fuse-helper");
  const ssize_t read_while_stopped = stuck_read.load();
  kill(slow.pid(), SIGCONT);
  stuck.join();
  close(fd);
  EXPECT_TRUE(in_flight) << "the read never reached the stopped daemon";
  ASSERT_TRUE(served) << "other IO waited for the stuck request";
  EXPECT_EQ(other_io.get(), "served");
  // (Usually one helper; a slow moment may add another, and then one of the
  // two may leave, but not both.)
  ASSERT_FALSE(helpers.empty());
  EXPECT_TRUE(std::any_of(helpers.begin(), helpers.end(), [&](const auto& t) {
    return std::count(helpers_after.begin(), helpers_after.end(), t) > 0;
  })) << "the helper left while still needed";
  EXPECT_EQ(ReadWholeFile(mnt_ / "meanwhile"), "again 4");
  EXPECT_EQ(read_while_stopped, -2) << "the stuck read did not wait";
  EXPECT_EQ(stuck_read.load(), 9);  // and completes once the daemon runs
}

INSTANTIATE_TEST_SUITE_P(Polling, FuseStuckRequestTest,
                         ::testing::Values(0, 200), [](const auto& info) {
                           return "poll" + std::to_string(info.param);
                         });

TEST_F(FuseVolumeTest, OpenFileFollowsRenamesOfItselfAndItsDirectory) {
  Mount("", {"--kernel-cache", "off"});
  ASSERT_EQ(mkdir((mnt_ / "d1").c_str(), 0755), 0);
  int fd = open((mnt_ / "d1/f").c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "one", 3, 0), 3);
  ASSERT_EQ(rename((mnt_ / "d1").c_str(), (mnt_ / "d2").c_str()), 0);
  ASSERT_EQ(pwrite(fd, "two", 3, 3), 3);
  ASSERT_EQ(rename((mnt_ / "d2/f").c_str(), (mnt_ / "d2/g").c_str()), 0);
  ASSERT_EQ(pwrite(fd, "six", 3, 6), 3);
  char buf[16] = {};
  ASSERT_EQ(pread(fd, buf, sizeof(buf), 0), 9);
  EXPECT_EQ(std::string(buf, 9), "onetwosix");
  close(fd);
  EXPECT_EQ(ReadWholeFile(backing_ / "d2/g"), "onetwosix");
  EXPECT_EQ(List(backing_ / "d2"), (std::vector<std::string>{".", "..", "g"}));
}

TEST_F(FuseVolumeTest, CapabilityXattrSetThroughTheVolumeIsSeenAtOnce) {
  Mount();  // kernel cache auto: writes go through the page cache
  const std::string f = mnt_ / "bin";
  WriteWholeFile(f, "x");  // the kernel asks for security.capability
  WriteWholeFile(f, "y");  // and is answered by sroute-fuse itself
  char buf[64];
  EXPECT_EQ(getxattr(f.c_str(), "security.capability", buf, sizeof(buf)), -1);
  EXPECT_EQ(errno, ENODATA);
  // struct vfs_cap_data, revision 2: CAP_NET_BIND_SERVICE permitted.
  const uint32_t cap[5] = {0x02000000, 1u << 10, 0, 0, 0};
  ASSERT_EQ(setxattr(f.c_str(), "security.capability", cap, sizeof(cap), 0), 0);
  EXPECT_EQ(getxattr(f.c_str(), "security.capability", buf, sizeof(buf)),
            static_cast<ssize_t>(sizeof(cap)));
  EXPECT_EQ(getxattr((backing_ / "bin").c_str(), "security.capability", buf,
                     sizeof(buf)),
            static_cast<ssize_t>(sizeof(cap)));
  ASSERT_EQ(removexattr(f.c_str(), "security.capability"), 0);
  WriteWholeFile(f, "z");
  EXPECT_EQ(getxattr(f.c_str(), "security.capability", buf, sizeof(buf)), -1);
  EXPECT_EQ(errno, ENODATA);
}

}  // namespace
}  // namespace sroute

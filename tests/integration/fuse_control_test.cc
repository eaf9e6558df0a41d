// sroute-fuse with a live control port: sroutectl (run as a subprocess)
// adds and removes rules while the volume is mounted and in use.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/run_command.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::MountedVolume;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunCommand;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;

// Runs sroutectl with `args` (shell words).
std::pair<int, std::string> Ctl(const std::string& args) {
  return RunCommand(std::string(SROUTECTL_BINARY) + " " + args);
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
  void Mount() {
    sock_ = ctl_dir_ / "control.sock";
    volume_ = std::make_unique<MountedVolume>(
        SROUTE_FUSE_BINARY, mnt_.path(),
        std::vector<std::string>{"--backing", backing_.path(), "--endpoint",
                                 "other=" + other_.path(), "--control", sock_,
                                 "--kernel-cache", "auto"});
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
  EXPECT_NE(out.find("\"id\": " + id), std::string::npos) << out;

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
  // (No std::regex: GCC 12 warns falsely in it under ASan.)
  const size_t rec = out.find("{\"id\": " + last_id + ",");
  ASSERT_NE(rec, std::string::npos) << out;
  const size_t ops = out.find("\"ops\": ", rec);
  ASSERT_NE(ops, std::string::npos) << out;
  EXPECT_GT(std::stoull(out.substr(ops + 7)), 0u) << out;
  std::tie(rc, out) = Ctl(Host() + " stats");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("P99_US"), std::string::npos) << out;
}

}  // namespace
}  // namespace sroute

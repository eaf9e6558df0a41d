// SPDX-License-Identifier: Apache-2.0
// The hello app (examples/hello_app) end to end, both ways it runs: loaded
// into sroute-controller from its plug-in, and as sroute-hello-app in a
// process of its own. A controller, a storage server S2 and a mounted FUSE
// volume run as real processes on 127.0.0.1; the app moves the writes of
// //home/hello.dat to S2's hello.tmp and back, and reads through the mount
// must return the newest bytes all along.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "controller/client.h"
#include "gtest/gtest.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/run_command.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;
using ::sroute::testing::MountedVolume;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunCommand;
using ::sroute::testing::ServerProcess;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteSecretFile;
using ::sroute::testing::WriteWholeFile;

const std::string kSecret = "test-cluster-secret-0123456789";
const std::string kFuse = "fuse-test";
const std::string kFile = "//home/hello.dat";
// Long enough for the test to write and check while the writes are away.
const std::string kArgs =
    "sswitch=" + kFuse + ",file=" + kFile + ",to=//S2/hello.tmp,period_ms=4000";
const std::string kAwayRule =
    "<*, w, //home/hello.dat> -> track_writes(); <IO, //S2/hello.tmp>";
const std::string kHomeRule =
    "<*, w, //home/hello.dat> -> track_writes(); <IO, //home/hello.dat>";
constexpr size_t kSize = 64 * 1024;

// A child process whose output goes to the test's; killed if still running
// when destroyed.
class ChildProcess {
 public:
  ChildProcess(const std::string& binary, std::vector<std::string> args) {
    pid_ = fork();
    if (pid_ == 0) {
      args.insert(args.begin(), binary);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(binary.c_str(), argv.data());
      _exit(127);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Its exit code, once it exits within 20 s.
  std::optional<int> WaitExit() {
    for (int i = 0; i < 2000 && pid_ > 0; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

 private:
  pid_t pid_ = -1;
};

int PwriteAll(const std::string& path, const std::string& data, off_t offset) {
  const int fd = open(path.c_str(), O_WRONLY);
  if (fd < 0) return errno;
  const ssize_t n = pwrite(fd, data.data(), data.size(), offset);
  const int err = n < 0 ? errno : 0;
  close(fd);
  if (err != 0) return err;
  return n == static_cast<ssize_t>(data.size()) ? 0 : EIO;
}

class HelloAppTest : public ::testing::Test {
 protected:
  void SetUp() override {
    secret_ = WriteSecretFile(keys_ / "secret", kSecret);
    WriteWholeFile(home_ / "hello.dat", model_);
    // Detour targets are not created for the rule (yet): TO must exist.
    WriteWholeFile(s2_ / "hello.tmp", "");
  }
  void TearDown() override {
    app_.reset();
    client_.reset();
    volume_.reset();
    server_.reset();
    controller_.reset();
  }

  void Start(const std::vector<std::string>& controller_args) {
    std::vector<std::string> args = {"--db",  db_ / "db", "--secret-file",
                                     secret_, "--listen", "127.0.0.1:0"};
    args.insert(args.end(), controller_args.begin(), controller_args.end());
    controller_ =
        std::make_unique<ServerProcess>(SROUTE_CONTROLLER_BINARY, args);
    ASSERT_TRUE(controller_->ok()) << "sroute-controller did not start";
    server_ = std::make_unique<ServerProcess>(
        SROUTE_SERVER_BINARY,
        std::vector<std::string>{
            "--root", s2_.path(), "--name", "S2", "--secret-file", secret_,
            "--listen", "127.0.0.1:0", "--controller", controller_->address()});
    ASSERT_TRUE(server_->ok()) << "sroute-server did not start";
    volume_ = std::make_unique<MountedVolume>(
        SROUTE_FUSE_BINARY, mnt_.path(),
        std::vector<std::string>{"--backing", home_.path(), "--secret-file",
                                 secret_, "--kernel-cache", "off", "--name",
                                 kFuse, "--controller", controller_->address(),
                                 "--endpoint", "S2=" + server_->address()});
    ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  }
  void StartApp() {
    app_ = std::make_unique<ChildProcess>(
        SROUTE_HELLO_APP_BINARY,
        std::vector<std::string>{"--controller", controller_->address(),
                                 "--secret-file", secret_, "--args", kArgs});
  }
  // The client reads the app's state: it has the app's name.
  ControllerClient& Client() {
    if (!client_) {
      ControllerClient::Options o;
      o.address = controller_->address();
      o.secret = kSecret;
      o.name = "hello";
      auto c = ControllerClient::Connect(o);
      EXPECT_TRUE(c.ok()) << c.status();
      client_ = *std::move(c);
    }
    return *client_;
  }
  std::string Progress() {
    auto s = Client().GetState(kFile);
    return s.ok() ? *s : s.status().ToString();
  }
  std::vector<std::string> RuleTexts() {
    std::vector<std::string> out;
    auto rules = Client().Rules(kFuse);
    EXPECT_TRUE(rules.ok()) << rules.status();
    if (rules.ok()) {
      for (const proto::ManagedRule& r : *rules) out.push_back(r.text());
    }
    return out;
  }
  void Write(off_t offset, const std::string& data) {
    ASSERT_EQ(PwriteAll(mnt_ / "hello.dat", data, offset), 0);
    model_.replace(offset, data.size(), data);
  }

  // What both ways of running the app must do, once it runs.
  void MovesWritesAwayAndBack() {
    ASSERT_TRUE(Eventually([&] { return Progress() == "away"; })) << Progress();
    EXPECT_EQ(RuleTexts(), std::vector<std::string>{kAwayRule});
    // Away: writes land in S2's hello.tmp; reads through the mount return
    // them, though the home copy still has the old bytes.
    const std::string a(4096, 'A'), b(4096, 'B');
    Write(0, a);
    Write(16384, b);
    const std::string tmp = ReadWholeFile(s2_ / "hello.tmp");
    ASSERT_GE(tmp.size(), 16384u + 4096u);
    EXPECT_EQ(tmp.substr(0, 4096), a);
    EXPECT_EQ(tmp.substr(16384, 4096), b);
    EXPECT_EQ(ReadWholeFile(home_ / "hello.dat"), std::string(kSize, 'o'));
    EXPECT_EQ(ReadWholeFile(mnt_ / "hello.dat"), model_);

    // Home: new writes land in the home file, one of them over half of a
    // range still on S2, and reads return the newest bytes of every range.
    ASSERT_TRUE(Eventually([&] { return Progress() == "home"; })) << Progress();
    EXPECT_EQ(RuleTexts(), std::vector<std::string>{kHomeRule});
    const std::string c(4096, 'C'), d(100, 'D');
    Write(2048, c);
    Write(40000, d);
    const std::string home = ReadWholeFile(home_ / "hello.dat");
    ASSERT_EQ(home.size(), kSize);
    EXPECT_EQ(home.substr(2048, 4096), c);
    EXPECT_EQ(home.substr(40000, 100), d);
    EXPECT_EQ(home.substr(0, 2048), std::string(2048, 'o'));
    EXPECT_EQ(ReadWholeFile(s2_ / "hello.tmp"), tmp);
    EXPECT_EQ(ReadWholeFile(mnt_ / "hello.dat"), model_);
  }

  TempDir keys_, db_, home_, mnt_, s2_;
  std::string secret_;
  std::string model_ = std::string(kSize, 'o');
  std::unique_ptr<ServerProcess> controller_, server_;
  std::unique_ptr<MountedVolume> volume_;
  std::unique_ptr<ControllerClient> client_;
  std::unique_ptr<ChildProcess> app_;
};

TEST_F(HelloAppTest, RunsFromAPlugin) {
  // The plug-in defines nothing but its entry point: the rest of sroute it
  // takes from the controller that loads it.
  auto [rc, defined] = RunCommand(std::string("nm -D --defined-only ") +
                                  SROUTE_HELLO_APP_PLUGIN);
  ASSERT_EQ(rc, 0) << defined;
  EXPECT_NE(defined.find(" T sroute_register_apps\n"), std::string::npos)
      << defined;
  EXPECT_EQ(defined.find("6sroute"), std::string::npos) << defined;

  Start({"--plugin", SROUTE_HELLO_APP_PLUGIN, "--app", "hello:" + kArgs});
  MovesWritesAwayAndBack();
}

TEST_F(HelloAppTest, RunsOutOfProcess) {
  Start({});
  StartApp();
  MovesWritesAwayAndBack();
  // Done, it exits; run again, it finds its progress and changes nothing.
  EXPECT_EQ(app_->WaitExit(), 0);
  auto before = Client().Rules(kFuse);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_EQ(before->size(), 1u);
  StartApp();
  EXPECT_EQ(app_->WaitExit(), 0);
  auto after = Client().Rules(kFuse);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].cid(), (*before)[0].cid());
  EXPECT_EQ(Progress(), "home");
}

}  // namespace
}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// ClusterFixture: the processes of a cluster test, started by the test on
// 127.0.0.1 and stopped by it: storage servers and a FUSE volume that take
// their rules from the controllers ControllerList() names (one process, or
// several sharing a store). Fixtures derive from it and start the
// controllers their way; servers and the volume go before them.
#ifndef SROUTE_TESTS_UTIL_CLUSTER_FIXTURE_H_
#define SROUTE_TESTS_UTIL_CLUSTER_FIXTURE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/run_command.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"

namespace sroute::testing {

class ClusterFixture : public ::testing::Test {
 protected:
  static inline const std::string kSecret = "test-cluster-secret-0123456789";

  // `fuse_name`: the volume's sSwitch name.
  explicit ClusterFixture(std::string fuse_name)
      : fuse_name_(std::move(fuse_name)) {}

  void SetUp() override {
    secret_ = WriteSecretFile(keys_ / "secret", kSecret);
  }
  // The volume, then the servers (the controllers are the fixture's).
  void TearDown() override {
    volume_.reset();
    servers_.clear();
  }

  // What hosts are given as --controller.
  virtual std::string ControllerList() const = 0;

  // sroute-server `name` on `root`, listening on `port` (0: any), with
  // `extra` flags; kept in servers_[name].
  ServerProcess* StartServer(const std::string& name, const std::string& root,
                             int port = 0,
                             const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "--root",        root,
        "--name",        name,
        "--secret-file", secret_,
        "--listen",      "127.0.0.1:" + std::to_string(port),
        "--controller",  ControllerList()};
    args.insert(args.end(), extra.begin(), extra.end());
    auto s = std::make_unique<ServerProcess>(SROUTE_SERVER_BINARY, args);
    EXPECT_TRUE(s->ok()) << "sroute-server " << name << " did not start";
    servers_[name] = std::move(s);
    return servers_[name].get();
  }
  // The volume at mnt_ over home_ (kernel cache off), its control socket
  // at ctl_/sock, with `endpoints` (NAME=WHERE) and `extra` flags.
  void Mount(const std::vector<std::string>& endpoints,
             const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "--backing",      home_.path(),     "--secret-file",
        secret_,          "--kernel-cache", "off",
        "--name",         fuse_name_,       "--controller",
        ControllerList(), "--control",      ctl_ / "sock"};
    for (const std::string& e : endpoints) {
      args.push_back("--endpoint");
      args.push_back(e);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    volume_ =
        std::make_unique<MountedVolume>(SROUTE_FUSE_BINARY, mnt_.path(), args);
    ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  }
  // The volume's control socket, as sroutectl --host takes it.
  std::string VolumeHost() const { return "unix:" + (ctl_ / "sock"); }
  // `sroutectl --host HOST rules ls`: what the host has installed.
  std::string HostRules(const std::string& host) const {
    return RunCommand(std::string(SROUTECTL_BINARY) + " --host " + host +
                      " --secret-file " + secret_ + " rules ls")
        .second;
  }

  const std::string fuse_name_;
  TempDir keys_, home_, mnt_, ctl_, r1_, r2_;
  std::string secret_;
  std::map<std::string, std::unique_ptr<ServerProcess>> servers_;
  std::unique_ptr<MountedVolume> volume_;
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_CLUSTER_FIXTURE_H_

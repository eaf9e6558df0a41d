// SPDX-License-Identifier: Apache-2.0
// ServerTest: the fixture of tests that run storage servers and a FUSE
// volume as real processes on 127.0.0.1 (server_test.cc,
// replica_set_test.cc): a cluster secret, servers by name and root, a mount
// with endpoints and rules, and sroutectl.
#ifndef SROUTE_TESTS_INTEGRATION_SERVER_FIXTURE_H_
#define SROUTE_TESTS_INTEGRATION_SERVER_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/run_command.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"

namespace sroute {

inline const std::string kSecret = "test-cluster-secret-0123456789";

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    secret_ = testing::WriteSecretFile(keys_ / "secret", kSecret);
  }
  void TearDown() override {
    volume_.reset();
    servers_.clear();
  }

  testing::ServerProcess* StartServer(const std::string& name,
                                      const std::string& root,
                                      std::vector<std::string> extra = {},
                                      int port = 0) {
    std::vector<std::string> args = {
        "--root",        root,
        "--name",        name,
        "--secret-file", secret_,
        "--listen",      "127.0.0.1:" + std::to_string(port)};
    args.insert(args.end(), extra.begin(), extra.end());
    auto s =
        std::make_unique<testing::ServerProcess>(SROUTE_SERVER_BINARY, args);
    EXPECT_TRUE(s->ok()) << "sroute-server " << name << " did not start";
    servers_.push_back(std::move(s));
    return servers_.back().get();
  }

  // Mounts with the home in home_, `endpoints` (NAME=ADDR), `rules`.
  void Mount(const std::vector<std::string>& endpoints,
             const std::string& rules, std::vector<std::string> extra = {}) {
    volume_ =
        MountHost("fuse-test", mnt_, ctl_, endpoints, rules, std::move(extra));
    ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  }

  // Another FUSE host, `name`, on the same home (at `mnt`, its socket and
  // rules in `ctl`): Mount() is the first.
  std::unique_ptr<testing::MountedVolume> MountHost(
      const std::string& name, const testing::TempDir& mnt,
      const testing::TempDir& ctl, const std::vector<std::string>& endpoints,
      const std::string& rules, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--backing",      home_.path(), "--secret-file", secret_,
        "--kernel-cache", "off",        "--name",        name,
        "--control",      ctl / "sock"};
    for (const std::string& e : endpoints) {
      args.push_back("--endpoint");
      args.push_back(e);
    }
    if (!rules.empty()) {
      testing::WriteWholeFile(ctl / "test.rules", rules);
      args.push_back("--rules");
      args.push_back(ctl / "test.rules");
    }
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<testing::MountedVolume>(SROUTE_FUSE_BINARY,
                                                    mnt.path(), args);
  }

  std::pair<int, std::string> Ctl(const std::string& args) {
    return testing::RunCommand(std::string(SROUTECTL_BINARY) + " " + args);
  }

  testing::TempDir keys_, home_, mnt_, ctl_, r1_, r2_, r3_;
  std::string secret_;
  std::vector<std::unique_ptr<testing::ServerProcess>> servers_;
  std::unique_ptr<testing::MountedVolume> volume_;
};

}  // namespace sroute

#endif  // SROUTE_TESTS_INTEGRATION_SERVER_FIXTURE_H_

// SPDX-License-Identifier: Apache-2.0
// ControllerFixture: a ClusterFixture whose hosts register with one
// sroute-controller on RocksDB, started by the test (StartController) on
// 127.0.0.1, with a ControllerClient to it (Client).
#ifndef SROUTE_TESTS_UTIL_CONTROLLER_FIXTURE_H_
#define SROUTE_TESTS_UTIL_CONTROLLER_FIXTURE_H_

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "controller/client.h"
#include "gtest/gtest.h"
#include "tests/util/cluster_fixture.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"

namespace sroute::testing {

class ControllerFixture : public ClusterFixture {
 protected:
  explicit ControllerFixture(std::string fuse_name)
      : ClusterFixture(std::move(fuse_name)) {}
  void TearDown() override {
    client_.reset();
    ClusterFixture::TearDown();
    controller_.reset();
  }
  std::string ControllerList() const override { return controller_->address(); }

  // The controller on `port` (0: any) with `extra` flags; its statistics
  // come every 200 ms unless `extra` says otherwise. A restart keeps db_.
  void StartController(int port = 0,
                       const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {
        "--db",  db_ / "db", "--secret-file",
        secret_, "--listen", "127.0.0.1:" + std::to_string(port)};
    if (std::find(extra.begin(), extra.end(), "--stats-interval-ms") ==
        extra.end()) {
      args.insert(args.end(), {"--stats-interval-ms", "200"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    client_.reset();
    controller_ =
        std::make_unique<ServerProcess>(SROUTE_CONTROLLER_BINARY, args);
    ASSERT_TRUE(controller_->ok()) << "sroute-controller did not start";
  }
  // A client of the controller as it runs now (made on first use).
  ControllerClient& Client() {
    if (!client_) {
      ControllerClient::Options o;
      o.address = controller_->address();
      o.secret = kSecret;
      o.name = "test";
      auto c = ControllerClient::Connect(o);
      EXPECT_TRUE(c.ok()) << c.status();
      client_ = *std::move(c);
    }
    return *client_;
  }

  TempDir db_;
  std::unique_ptr<ServerProcess> controller_;
  std::unique_ptr<ControllerClient> client_;
};

}  // namespace sroute::testing

#endif  // SROUTE_TESTS_UTIL_CONTROLLER_FIXTURE_H_

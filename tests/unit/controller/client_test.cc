// SPDX-License-Identifier: Apache-2.0
// ControllerClient across several controllers (controller/client.h): a call
// that could not leave for a controller that is down goes on to the next,
// even when a follower named that one as the leader; a call that may have
// been carried out is not sent twice.
#include "controller/client.h"

#include "gtest/gtest.h"
#include "rpc/io_threads.h"
#include "rpc/leader.h"
#include "rpc/server.h"

namespace sroute {
namespace {

constexpr char kClientTestSecret[] = "0123456789abcdef-test-secret";

class ControllerClientTest : public ::testing::Test {
 protected:
  // A controller stand-in on 127.0.0.1 that answers every request with
  // `answer` (ok: an empty host list).
  std::unique_ptr<RpcServer> Serve(absl::Status answer) {
    RpcServer::Options o;
    o.name = "stand-in";
    o.secret = kClientTestSecret;
    auto server =
        RpcServer::Start(&threads_, "127.0.0.1:0", o,
                         [answer](std::unique_ptr<RpcServer::Call> call) {
                           if (!answer.ok()) return call->ReplyStatus(answer);
                           proto::RpcReply reply;
                           reply.mutable_controller()->mutable_hosts();
                           call->Reply(reply);
                         });
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }
  // An address nobody listens on (a server started and stopped).
  std::string DeadAddress() {
    auto gone = Serve(absl::OkStatus());
    const std::string address = gone->address();
    gone.reset();
    return address;
  }
  std::unique_ptr<ControllerClient> Client(
      const std::string& addresses,
      absl::Duration timeout = absl::Seconds(10)) {
    ControllerClient::Options o;
    o.address = addresses;
    o.secret = kClientTestSecret;
    o.timeout = timeout;
    auto c = ControllerClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  IoThreads threads_{1};
};

TEST_F(ControllerClientTest, ACallThatNeverLeftGoesToTheNextController) {
  const std::string dead = DeadAddress();
  // The follower still names the dead one as the leader (it has not seen
  // the leader's lease run out yet).
  auto follower = Serve(NotLeaderError("follower", dead));
  auto leader = Serve(absl::OkStatus());
  auto client =
      Client(follower->address() + "," + dead + "," + leader->address());
  ASSERT_NE(client, nullptr);
  auto hosts = client->ListHosts();
  EXPECT_TRUE(hosts.ok()) << hosts.status();
}

TEST_F(ControllerClientTest, NoControllerUpIsAClearErrorNotAHang) {
  const std::string dead = DeadAddress();
  auto follower = Serve(NotLeaderError("follower", dead));
  auto client = Client(follower->address() + "," + dead, absl::Seconds(1));
  ASSERT_NE(client, nullptr);
  auto hosts = client->ListHosts();  // tried until the call's deadline
  ASSERT_FALSE(hosts.ok());
  EXPECT_TRUE(absl::IsUnavailable(hosts.status())) << hosts.status();
}

TEST(NotSentTest, OnlyCallsThatNeverLeftAreMarked) {
  EXPECT_FALSE(NotSent(absl::OkStatus()));
  EXPECT_FALSE(NotSent(absl::UnavailableError("connection lost")));
}

}  // namespace
}  // namespace sroute

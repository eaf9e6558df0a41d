// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hostctl/control_client.h"
#include "hostctl/control_server.h"
#include "proto/rpc.pb.h"
#include "rpc/fd_frames.h"
#include "rpc/rule_codec.h"
#include "rules/parser.h"
#include "sswitch/sswitch.h"
#include "tests/util/holding_endpoint.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::HoldingEndpoint;
using ::sroute::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::SizeIs;

int Connect(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// True when the peer closes `fd` within 5 s.
bool ClosedByPeer(int fd) {
  pollfd p{fd, POLLIN, 0};
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (poll(&p, 1, 100) > 0) {
      char buf[64];
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
  }
  return false;
}

class ControlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::make_shared<HoldingEndpoint>();
    b_ = std::make_shared<HoldingEndpoint>();
    ASSERT_TRUE(sw_.AddEndpoint("A", a_).ok());
    ASSERT_TRUE(sw_.AddEndpoint("B", b_).ok());
    path_ = dir_ / "control.sock";
    auto server =
        ControlServer::Start(&sw_, path_, [this] { changes_.fetch_add(1); });
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    auto client = ControlClient::Connect(path_);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    EXPECT_EQ(sw_.in_flight(), 0);
  }

  proto::ControlResponse Call(const proto::ControlRequest& req) {
    auto r = client_->Call(req, absl::Seconds(10));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : proto::ControlResponse();
  }
  proto::ControlResponse Add(std::vector<std::string> rules) {
    proto::ControlRequest req;
    for (auto& r : rules) req.mutable_add_rules()->add_text(r);
    req.mutable_add_rules()->set_owner("test");
    return Call(req);
  }
  proto::ControlResponse List() {
    proto::ControlRequest req;
    req.mutable_list_rules();
    return Call(req);
  }
  // Routes a write of `n` bytes to `file`; returns true if it completed.
  bool Write(const std::string& file, uint64_t n, Io* io) {
    io->header.source = "t";
    io->header.op = Op::kWrite;
    io->header.file = file;
    io->header.offset = 0;
    io->header.length = n;
    done_ = false;
    io->set_completion([this](Io&) { done_ = true; });
    sw_.Route(io);
    return done_;
  }

  TempDir dir_;
  SSwitch sw_{"control-test"};
  std::shared_ptr<HoldingEndpoint> a_, b_;
  std::string path_;
  std::atomic<int> changes_{0};
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<ControlClient> client_;
  std::atomic<bool> done_{false};
};

// Rules the sender parsed (sroutectl) are checked (rules/validate.h), not
// parsed: good ones are added after the texts, in order; one no text could
// spell is refused by number, and nothing is added.
TEST_F(ControlTest, ParsedRulesAreCheckedNotParsed) {
  proto::ControlRequest req;
  req.mutable_add_rules()->add_text("<*, w, //A/x> -> <IO, //B/x>");
  RuleToMsg(*ParseRule("<*, w, //A/y> -> <IO, //B/y>"),
            req.mutable_add_rules()->add_rules());
  auto added = client_->Call(req, absl::Seconds(10));
  ASSERT_TRUE(added.ok()) << added.status();
  ASSERT_EQ(added->ids_size(), 2);
  ASSERT_EQ(List().rules_size(), 2);
  EXPECT_EQ(List().rules(1).text(), "<*, w, //A/y> -> <IO, //B/y>");

  Rule escaping = *ParseRule("<*, w, //A/z> -> <IO, //B/z>");
  escaping.detours[0].target.file = "//B/../z";
  RuleToMsg(escaping, req.mutable_add_rules()->add_rules());
  auto refused = client_->Call(req, absl::Seconds(10));
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(refused->message(),
              ::testing::HasSubstr("rule 3: detour 1: path component '..'"));
  EXPECT_EQ(List().rules_size(), 2);
}

TEST_F(ControlTest, SocketIsPrivate) {
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600);
}

TEST_F(ControlTest, AddListDelete) {
  proto::ControlResponse r =
      Add({"<*, r|w, //A/f> -> <IO, //B/f>", "<*, w, //A/g> -> <IO, //B/g>"});
  ASSERT_EQ(r.code(), 0) << r.message();
  ASSERT_THAT(r.ids(), SizeIs(2));
  EXPECT_EQ(r.protocol_version(), 1u);
  EXPECT_EQ(changes_.load(), 1);
  const uint64_t id1 = r.ids(0), id2 = r.ids(1);

  r = List();
  ASSERT_EQ(r.code(), 0);
  ASSERT_THAT(r.rules(), SizeIs(2));
  EXPECT_EQ(r.rules(0).id(), id1);
  EXPECT_EQ(r.rules(0).text(), "<*, r|w, //A/f> -> <IO, //B/f>");
  EXPECT_EQ(r.rules(0).owner(), "test");
  EXPECT_EQ(r.rules(1).id(), id2);
  EXPECT_EQ(r.version(), sw_.version());

  proto::ControlRequest del;
  del.mutable_delete_rules()->add_id(id1);
  r = Call(del);
  ASSERT_EQ(r.code(), 0) << r.message();
  EXPECT_EQ(changes_.load(), 2);
  r = List();
  ASSERT_THAT(r.rules(), SizeIs(1));
  EXPECT_EQ(r.rules(0).id(), id2);

  // Deleting it again: NotFound, and nothing changed.
  r = Call(del);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_THAT(r.message(), HasSubstr(std::to_string(id1)));
  EXPECT_EQ(changes_.load(), 2);
}

TEST_F(ControlTest, AddIsAllOrNothing) {
  proto::ControlResponse r =
      Add({"<*, r|w, //A/f> -> <IO, //B/f>", "<*, q, //A/g> -> <IO, //B/g>"});
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(r.message(), ::testing::StartsWith("rule 2: "));
  auto parsed = ParseRule("<*, q, //A/g> -> <IO, //B/g>");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(r.message(), "rule 2: " + std::string(parsed.status().message()));
  EXPECT_THAT(r.ids(), SizeIs(0));
  EXPECT_THAT(List().rules(), SizeIs(0));
  EXPECT_EQ(changes_.load(), 0);

  // One bad rule alone: just "COL: reason".
  r = Add({"<*, q, //A/g> -> <IO, //B/g>"});
  EXPECT_EQ(r.message(), std::string(parsed.status().message()));

  // A rule that parses but names an unknown endpoint fails validation.
  r = Add({"<*, w, //A/f> -> <IO, //B/f>", "<*, w, //A/g> -> <IO, //Z/g>"});
  EXPECT_NE(r.code(), 0);
  EXPECT_THAT(List().rules(), SizeIs(0));
}

TEST_F(ControlTest, DeleteByPattern) {
  ASSERT_EQ(Add({"<*, w, //A/f> -> <IO, //B/f>", "<*, w, //A/f> -> <IO, //B/x>",
                 "<*, w, //A/g> -> <IO, //B/g>"})
                .code(),
            0);
  proto::ControlRequest del;
  del.mutable_delete_rules()->set_pattern("<*, w, //A/f>");
  proto::ControlResponse r = Call(del);
  ASSERT_EQ(r.code(), 0) << r.message();
  r = List();
  ASSERT_THAT(r.rules(), SizeIs(1));
  EXPECT_EQ(r.rules(0).text(), "<*, w, //A/g> -> <IO, //B/g>");

  r = Call(del);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kNotFound));
  del.mutable_delete_rules()->set_pattern("<*, w");
  r = Call(del);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
}

TEST_F(ControlTest, QuiesceOnOff) {
  proto::ControlRequest q;
  q.mutable_quiesce()->set_pattern("<*, w, //A/f>");
  q.mutable_quiesce()->set_on(true);
  ASSERT_EQ(Call(q).code(), 0);
  Io io;
  EXPECT_FALSE(Write("//A/f", 10, &io));
  proto::ControlRequest stats;
  stats.mutable_stats();
  EXPECT_EQ(Call(stats).parked(), 1u);
  q.mutable_quiesce()->set_on(false);
  ASSERT_EQ(Call(q).code(), 0);
  EXPECT_TRUE(done_.load());
  EXPECT_EQ(Call(stats).parked(), 0u);
}

TEST_F(ControlTest, DrainWithTimeout) {
  a_->set_hold(true);
  Io io;
  EXPECT_FALSE(Write("//A/f", 10, &io));
  proto::ControlRequest d;
  d.mutable_drain()->set_pattern("<*, w, //A/f>");
  d.mutable_drain()->set_timeout_ms(100);
  const auto start = std::chrono::steady_clock::now();
  proto::ControlResponse r = Call(d);
  EXPECT_EQ(r.code(), static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(90));
  a_->Release();
  EXPECT_TRUE(done_.load());
  EXPECT_EQ(Call(d).code(), 0);
}

TEST_F(ControlTest, StatsCountRoutedIos) {
  proto::ControlResponse r = Add({"<*, w, //A/f> -> <IO, //B/f>"});
  ASSERT_EQ(r.code(), 0);
  for (int i = 0; i < 5; ++i) {
    Io io;
    EXPECT_TRUE(Write("//A/f", 100, &io));
  }
  Io other;
  EXPECT_TRUE(Write("//A/g", 100, &other));
  proto::ControlRequest stats;
  stats.mutable_stats();
  r = Call(stats);
  ASSERT_EQ(r.code(), 0);
  ASSERT_THAT(r.rules(), SizeIs(1));
  EXPECT_EQ(r.rules(0).ops(), 5u);
  EXPECT_EQ(r.rules(0).bytes(), 500u);
  EXPECT_EQ(r.rules(0).in_flight(), 0);
  EXPECT_EQ(r.rules(0).errors(), 0u);
  EXPECT_GT(r.rules(0).p50_ns(), 0u);
  EXPECT_GE(r.rules(0).p999_ns(), r.rules(0).p50_ns());
  EXPECT_EQ(r.in_flight(), 0);
}

TEST_F(ControlTest, EmptyRequestIsInvalid) {
  proto::ControlRequest req;
  EXPECT_EQ(Call(req).code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
}

TEST_F(ControlTest, SecondServerOnLivePathIsRefused) {
  auto second = ControlServer::Start(&sw_, path_, nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr(path_));
  // The first still serves.
  EXPECT_EQ(List().code(), 0);
}

// As /run/sroute/NAME.sock on a fresh boot: the socket's directory is made
// (0755); a missing directory further up is an error that names it.
TEST_F(ControlTest, MakesTheSocketsDirectoryOnly) {
  const std::string in_new_dir = dir_ / "run-sroute/vol.sock";
  auto server = ControlServer::Start(&sw_, in_new_dir, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  struct stat st {};
  ASSERT_EQ(stat((dir_ / "run-sroute").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_TRUE(ControlClient::Connect(in_new_dir).ok());
  auto deeper = ControlServer::Start(&sw_, dir_ / "no/such/vol.sock", nullptr);
  ASSERT_FALSE(deeper.ok());
  EXPECT_THAT(deeper.status().message(), HasSubstr(dir_ / "no/such"));
}

TEST_F(ControlTest, StaleSocketFileIsReplaced) {
  const std::string stale = dir_ / "stale.sock";
  {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, stale.data(), stale.size());
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    close(fd);  // the file stays, nobody listens
  }
  auto server = ControlServer::Start(&sw_, stale, nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = ControlClient::Connect(stale);
  ASSERT_TRUE(client.ok());
  proto::ControlRequest req;
  req.mutable_list_rules();
  auto r = (*client)->Call(req, absl::Seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->code(), 0);
  client->reset();
  server->reset();
  struct stat st {};
  EXPECT_NE(stat(stale.c_str(), &st), 0) << "socket file not removed";
}

TEST_F(ControlTest, GarbageFramesCloseTheConnection) {
  // Sends `bytes` (then ends its side of the stream if `end`): the server
  // must close the connection.
  auto closed_after = [&](std::vector<unsigned char> bytes, bool end) {
    const int fd = Connect(path_);
    if (fd < 0) return false;
    const bool sent = write(fd, bytes.data(), bytes.size()) ==
                      static_cast<ssize_t>(bytes.size());
    if (end) shutdown(fd, SHUT_WR);
    const bool closed = sent && ClosedByPeer(fd);
    close(fd);
    return closed;
  };
  // Frames as rpc/frame.h draws them: u32 message length, u32 payload
  // length, then the bytes.
  EXPECT_TRUE(closed_after({0x40, 0, 0, 0, 0, 0, 0, 0}, false))
      << "a 1 GiB message announced";
  EXPECT_TRUE(closed_after({0, 0, 0, 0, 0, 0, 0, 1}, false))
      << "a payload: the control socket takes none";
  EXPECT_TRUE(closed_after({0, 0, 0, 100, 0, 0, 0, 0, 1, 2, 3}, true))
      << "100 bytes announced, 3 sent, then the end";
  EXPECT_TRUE(
      closed_after({0, 0, 0, 4, 0, 0, 0, 0, 0x0f, 0xff, 0xff, 0xff}, false))
      << "bytes that do not parse (wire type 7, then a bad varint)";
  EXPECT_TRUE(closed_after({0, 0}, true)) << "a prefix cut short";
  // The old client and a new one are still served.
  EXPECT_EQ(List().code(), 0);
  auto client = ControlClient::Connect(path_);
  ASSERT_TRUE(client.ok());
  proto::ControlRequest req;
  req.mutable_list_rules();
  auto r = (*client)->Call(req, absl::Seconds(5));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->code(), 0);
}

TEST(ControlClientTest, TimesOutAgainstASilentServer) {
  TempDir dir;
  const std::string path = dir / "silent.sock";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int lfd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_EQ(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(lfd, 4), 0);
  auto client = ControlClient::Connect(path);
  ASSERT_TRUE(client.ok()) << client.status();
  const int afd = accept(lfd, nullptr, nullptr);  // and never answer
  ASSERT_GE(afd, 0);
  proto::ControlRequest req;
  req.mutable_list_rules();
  const auto start = std::chrono::steady_clock::now();
  auto r = (*client)->Call(req, absl::Milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded)
      << r.status();
  EXPECT_THAT(r.status().message(), HasSubstr(path));
  EXPECT_GE(took, std::chrono::milliseconds(290));
  EXPECT_LT(took, std::chrono::seconds(2));
  close(afd);
  close(lfd);
}

TEST(ControlClientTest, ConnectFailureNamesThePath) {
  TempDir dir;
  const std::string path = dir / "nobody.sock";
  auto client = ControlClient::Connect(path);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(client.status().message(), HasSubstr(path));
}

TEST_F(ControlTest, AnswersPingsAndRefusesWhatIsNotControl) {
  const int fd = Connect(path_);
  ASSERT_GE(fd, 0);
  FdFrameStream stream(fd, kControlFrameLimits);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  proto::RpcRequest ping;
  ping.set_id(7);
  ping.mutable_ping();
  ASSERT_TRUE(stream.Write(ping, deadline).ok());
  proto::RpcReply reply;
  ASSERT_TRUE(stream.Read(&reply, deadline).ok());
  EXPECT_EQ(reply.id(), 7u);
  EXPECT_EQ(reply.code(), 0);
  // An IO is a storage server's to serve, not a control socket's.
  proto::RpcRequest io;
  io.set_id(8);
  io.mutable_io();
  ASSERT_TRUE(stream.Write(io, deadline).ok());
  ASSERT_TRUE(stream.Read(&reply, deadline).ok());
  EXPECT_EQ(reply.id(), 8u);
  EXPECT_EQ(reply.code(), static_cast<int>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(reply.message(), HasSubstr("control requests"));
  close(fd);
}

TEST(FdFrameStreamTest, RoundTripLimitsAndEnds) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  FdFrameStream a(fds[0], FrameLimits{1024, 0});
  FdFrameStream b(fds[1], FrameLimits{1024, 0});
  proto::ControlRequest req;
  req.set_request_id(42);
  req.mutable_add_rules()->add_text("<*, w, //A/f> -> <IO, //B/f>");
  ASSERT_TRUE(a.Write(req, deadline).ok());
  ASSERT_TRUE(a.Write(req, deadline).ok());  // two frames in one read
  proto::ControlRequest got;
  for (int i = 0; i < 2; ++i) {
    got.Clear();
    ASSERT_TRUE(b.Read(&got, deadline).ok());
    EXPECT_EQ(got.request_id(), 42u);
    EXPECT_EQ(got.add_rules().text(0), "<*, w, //A/f> -> <IO, //B/f>");
  }
  // Over the limit: refused before sending, and when announced.
  req.mutable_add_rules()->add_text(std::string(2000, 'x'));
  EXPECT_EQ(a.Write(req, deadline).code(),
            absl::StatusCode::kResourceExhausted);
  const unsigned char big[8] = {0, 0, 0x04, 0x01, 0, 0, 0, 0};  // 1025
  ASSERT_EQ(write(fds[0], big, 8), 8);
  EXPECT_EQ(b.Read(&got, deadline).code(),
            absl::StatusCode::kResourceExhausted);
  // A clean end between frames, and a deadline.
  FdFrameStream c(fds[1], FrameLimits{1024, 0});
  EXPECT_EQ(c.Read(&got, absl::Now() + absl::Milliseconds(50)).code(),
            absl::StatusCode::kDeadlineExceeded);
  close(fds[0]);
  EXPECT_EQ(c.Read(&got, deadline).code(), absl::StatusCode::kOutOfRange);
  close(fds[1]);
}

}  // namespace
}  // namespace sroute

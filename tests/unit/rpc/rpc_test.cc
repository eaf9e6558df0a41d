// SPDX-License-Identifier: Apache-2.0
// The RPC layer on real loopback sockets: framing, the handshake, pipelined
// calls, deadlines, bad peers and reconnection; and the IO codec.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "rpc/channel.h"
#include "rpc/frame.h"
#include "rpc/handshake.h"
#include "rpc/io_codec.h"
#include "rpc/server.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;

const std::string kSecret = "0123456789abcdef-test-secret";

TEST(FrameTest, RoundTripsByteByByte) {
  proto::RpcRequest req;
  req.set_id(7);
  req.mutable_io()->set_path("a/b");
  std::string stream;
  const std::string payload(5000, 'x');
  ASSERT_TRUE(AppendFrame(req, payload, FrameLimits(), &stream).ok());
  req.set_id(8);
  ASSERT_TRUE(AppendFrame(req, {}, FrameLimits(), &stream).ok());
  FrameDecoder d{FrameLimits()};
  std::vector<std::pair<uint64_t, size_t>> got;
  for (char c : stream) {
    d.Feed(std::string_view(&c, 1));
    Frame f;
    bool have = false;
    ASSERT_TRUE(d.Next(&f, &have).ok());
    if (have) {
      proto::RpcRequest r;
      ASSERT_TRUE(r.ParseFromArray(f.header.data(), f.header.size()));
      got.emplace_back(r.id(), f.payload.size());
    }
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], std::make_pair(uint64_t{7}, size_t{5000}));
  EXPECT_EQ(got[1], std::make_pair(uint64_t{8}, size_t{0}));
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameTest, OversizedLengthsFailAtThePrefix) {
  FrameDecoder d{FrameLimits{100, 1000}};
  // Header length 101: refused before any of the body arrives.
  d.Feed(std::string("\0\0\0\x65\0\0\0\0", 8));
  Frame f;
  bool have = false;
  absl::Status s = d.Next(&f, &have);
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  // Final: the stream cannot be resynchronized.
  EXPECT_FALSE(d.Next(&f, &have).ok());

  FrameDecoder p{FrameLimits{100, 1000}};
  p.Feed(std::string("\0\0\0\x01\0\0\x10\0", 8));  // payload 4096 > 1000
  EXPECT_TRUE(absl::IsResourceExhausted(p.Next(&f, &have)));

  proto::Hello big;
  big.set_name(std::string(200, 'n'));
  std::string out;
  EXPECT_TRUE(absl::IsResourceExhausted(
      AppendFrame(big, {}, FrameLimits{100, 1000}, &out)));
  EXPECT_TRUE(out.empty());
}

TEST(HandshakeTest, ProofsDependOnSecretRoleAndNonces) {
  const std::string c = NewNonce(), s = NewNonce();
  ASSERT_EQ(c.size(), kNonceBytes);
  EXPECT_NE(c, s);
  const std::string cp = ClientProof(kSecret, c, s);
  EXPECT_TRUE(ProofMatches(cp, ClientProof(kSecret, c, s)));
  EXPECT_FALSE(ProofMatches(cp, ServerProof(kSecret, c, s)));
  EXPECT_FALSE(ProofMatches(cp, ClientProof(kSecret + "x", c, s)));
  EXPECT_FALSE(ProofMatches(cp, ClientProof(kSecret, s, c)));
  EXPECT_FALSE(ProofMatches(cp, ""));
}

TEST(HandshakeTest, SecretFilesMustBePrivateAndLongEnough) {
  testing::TempDir dir;
  const std::string path = dir / "secret";
  testing::WriteWholeFile(path, kSecret + "\n");
  chmod(path.c_str(), 0644);
  auto open = LoadSecretFile(path);
  EXPECT_TRUE(absl::IsPermissionDenied(open.status())) << open.status();
  EXPECT_NE(open.status().message().find("chmod 600"), std::string::npos);
  chmod(path.c_str(), 0600);
  auto ok = LoadSecretFile(path);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, kSecret);  // without the newline
  testing::WriteWholeFile(path, "short");
  EXPECT_TRUE(absl::IsInvalidArgument(LoadSecretFile(path).status()));
  EXPECT_FALSE(LoadSecretFile(dir / "missing").ok());
}

// Every IoArgs field crosses the wire into the field of the same name (the
// codec maps them one to one); the second file comes back a full name.
TEST(IoCodecTest, ArgsCrossTheWireFieldForField) {
  Io io;
  io.header.source = "t";
  io.header.op = Op::kRenameFrom;
  IoArgs& a = io.args;
  a.mode = 0640;
  a.open_flags = O_WRONLY | O_TRUNC;
  a.rename_flags = RENAME_NOREPLACE;
  a.xattr_flags = XATTR_CREATE;
  a.fallocate_mode = FALLOC_FL_KEEP_SIZE;
  a.whence = SEEK_HOLE;
  a.truncate_mode = TruncateMode::kShrinkOnly;
  a.datasync = true;
  a.uid = 11;
  a.gid = 12;
  a.to_set = kSetAtime;
  a.size = 1234;
  a.rdev = 0x0801;
  a.atime = {5, 6};
  a.mtime = {7, 8};
  a.second_file = "d/new";
  a.symlink_text = "../t";
  a.xattr_name = "user.x";
  a.caller = Credentials::Of(21, 22, {23});
  proto::IoRequest req;
  EncodeIoRequest(io, "d/old", &req);
  Io got;
  ASSERT_TRUE(DecodeIoRequest(req, "S1", &got).ok());
  const IoArgs& b = got.args;
  EXPECT_EQ(got.header.file, "//S1/d/old");
  EXPECT_EQ(b.mode, a.mode);
  EXPECT_EQ(b.open_flags, a.open_flags);
  EXPECT_EQ(b.rename_flags, a.rename_flags);
  EXPECT_EQ(b.xattr_flags, a.xattr_flags);
  EXPECT_EQ(b.fallocate_mode, a.fallocate_mode);
  EXPECT_EQ(b.whence, a.whence);
  EXPECT_EQ(b.truncate_mode, a.truncate_mode);
  EXPECT_EQ(b.datasync, a.datasync);
  EXPECT_EQ(b.uid, a.uid);
  EXPECT_EQ(b.gid, a.gid);
  EXPECT_EQ(b.to_set, a.to_set);
  EXPECT_EQ(b.size, a.size);
  EXPECT_EQ(b.rdev, a.rdev);
  EXPECT_EQ(b.atime.tv_sec, 5);
  EXPECT_EQ(b.atime.tv_nsec, 6);
  EXPECT_EQ(b.mtime.tv_sec, 7);
  EXPECT_EQ(b.mtime.tv_nsec, 8);
  EXPECT_EQ(b.second_file, "//S1/d/new");
  EXPECT_EQ(b.symlink_text, a.symlink_text);
  EXPECT_EQ(b.xattr_name, a.xattr_name);
  EXPECT_EQ(b.caller, a.caller);

  // Every truncate mode, and none that is not one.
  io.header.op = Op::kTruncate;
  for (TruncateMode m : {TruncateMode::kExact, TruncateMode::kGrowOnly,
                         TruncateMode::kShrinkOnly}) {
    a.truncate_mode = m;
    req.Clear();
    EncodeIoRequest(io, "f", &req);
    Io t;
    ASSERT_TRUE(DecodeIoRequest(req, "S1", &t).ok());
    EXPECT_EQ(t.args.truncate_mode, m);
  }
  req.mutable_args()->set_truncate_mode(static_cast<proto::TruncateMode>(7));
  Io bad;
  EXPECT_TRUE(absl::IsInvalidArgument(DecodeIoRequest(req, "S1", &bad)));
}

// A write's reply carries the congestion mark and the window that made it
// (the replica set cuts once per window: stages/steering/aimd.h); an
// unmarked reply carries neither.
TEST(IoCodecTest, TheCongestionMarkAndItsWindowCrossTheWire) {
  Io done;
  done.header.op = Op::kWrite;
  done.bytes = 4096;
  done.congested = true;
  done.congested_window = 42;
  proto::RpcReply reply;
  EncodeIoReply(done, &reply);
  Io caller;
  caller.header.op = Op::kWrite;
  ASSERT_TRUE(DecodeIoReply(reply, {}, &caller).ok());
  EXPECT_TRUE(caller.congested);
  EXPECT_EQ(caller.congested_window, 42u);
  EXPECT_EQ(caller.bytes, 4096u);
  Io calm;
  calm.header.op = Op::kWrite;
  reply.Clear();
  EncodeIoReply(calm, &reply);
  EXPECT_FALSE(reply.io().congested());
  EXPECT_EQ(reply.io().congested_window(), 0u);
  Io back;
  back.header.op = Op::kWrite;
  ASSERT_TRUE(DecodeIoReply(reply, {}, &back).ok());
  EXPECT_FALSE(back.congested);
  EXPECT_EQ(back.congested_window, 0u);
}

// A server whose handler echoes the payload back, and can hold calls
// without answering.
class RpcTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(0); }
  void TearDown() override {
    {
      std::lock_guard<std::mutex> l(held_mu_);
      held_.clear();
    }
    server_.reset();
  }

  void StartServer(uint16_t port) {
    RpcServer::Options o;
    o.name = "echo";
    o.secret = kSecret;
    auto s = RpcServer::Start(
        &threads_, "127.0.0.1:" + std::to_string(port), o,
        [this](std::unique_ptr<RpcServer::Call> call) {
          if (call->request().io().path() == "hold") {
            std::lock_guard<std::mutex> l(held_mu_);
            held_.push_back(std::move(call));
            return;
          }
          proto::RpcReply reply;
          reply.mutable_io()->set_bytes(call->payload().size());
          reply.mutable_io()->set_target(call->peer_name());
          call->Reply(reply, call->payload());
        });
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
  }

  std::unique_ptr<RpcChannel> Channel(std::string secret = kSecret) {
    RpcChannel::Options o;
    o.address = "127.0.0.1:" + std::to_string(server_->port());
    o.secret = secret;
    o.name = "tester";
    o.min_backoff = absl::Milliseconds(10);
    o.max_backoff = absl::Milliseconds(40);
    auto c = RpcChannel::Create(&client_threads_, o);
    EXPECT_TRUE(c.ok()) << c.status();
    return *std::move(c);
  }

  // A raw, authenticated socket (the test plays the client's handshake).
  int RawAuthenticated() {
    const int fd = RawConnect();
    proto::Hello hello;
    hello.set_protocol_version(kRpcProtocolVersion);
    const std::string cn = NewNonce();
    hello.set_nonce(cn);
    hello.set_name("raw");
    SendFrame(fd, hello);
    proto::Hello server_hello;
    EXPECT_TRUE(ReadFrame(fd, &server_hello));
    proto::Auth auth;
    auth.set_proof(ClientProof(kSecret, cn, server_hello.nonce()));
    SendFrame(fd, auth);
    proto::Auth server_auth;
    EXPECT_TRUE(ReadFrame(fd, &server_auth));
    EXPECT_TRUE(ProofMatches(ServerProof(kSecret, cn, server_hello.nonce()),
                             server_auth.proof()));
    return fd;
  }
  int RawConnect() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(server_->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
  }
  static void SendFrame(int fd, const google::protobuf::MessageLite& m) {
    std::string out;
    ASSERT_TRUE(AppendFrame(m, {}, FrameLimits(), &out).ok());
    ASSERT_EQ(write(fd, out.data(), out.size()),
              static_cast<ssize_t>(out.size()));
  }
  static bool ReadFrame(int fd, google::protobuf::MessageLite* m) {
    FrameDecoder d{FrameLimits()};
    while (true) {
      Frame f;
      bool have = false;
      if (!d.Next(&f, &have).ok()) return false;
      if (have) return m->ParseFromArray(f.header.data(), f.header.size());
      char buf[4096];
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n <= 0) return false;
      d.Feed(std::string_view(buf, n));
    }
  }
  // True when the server closed `fd` (read sees end of stream).
  static bool ClosedByPeer(int fd) {
    char buf[256];
    while (true) {
      const ssize_t n = read(fd, buf, sizeof(buf));
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

  absl::Status Echo(RpcChannel& ch, const std::string& data,
                    absl::Duration timeout = absl::Seconds(5)) {
    proto::RpcRequest req;
    req.mutable_io()->set_path("echo");
    std::string back;
    auto r = ch.CallSync(req, timeout, data, &back);
    if (!r.ok()) return r.status();
    if (back != data) return absl::DataLossError("echo differs");
    return absl::OkStatus();
  }

  IoThreads threads_{2};
  IoThreads client_threads_{1};
  std::unique_ptr<RpcServer> server_;
  std::mutex held_mu_;
  std::vector<std::unique_ptr<RpcServer::Call>> held_;
};

TEST_F(RpcTest, PipelinedCallsFromManyThreadsAllComeBack) {
  auto ch = Channel();
  ASSERT_TRUE(ch->Connect(absl::Seconds(5)).ok());
  EXPECT_EQ(ch->peer_name(), "echo");
  constexpr int kThreads = 4, kCalls = 500;
  std::atomic<int> good{0};
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        proto::RpcRequest req;
        req.mutable_io()->set_path("echo");
        const std::string data(1 + (i * 37 + t) % 9000,
                               static_cast<char>('a' + i % 26));
        ch->Call(req, data, absl::Seconds(10),
                 [&, data](const absl::Status& s, proto::RpcReply& reply,
                           std::span<const char> payload) {
                   if (s.ok() && reply.code() == 0 &&
                       std::string(payload.data(), payload.size()) == data &&
                       reply.io().target() == "tester") {
                     good.fetch_add(1);
                   }
                   std::lock_guard<std::mutex> l(mu);
                   ++done;
                   cv.notify_all();
                 });
      }
    });
  }
  for (auto& t : ts) t.join();
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done == kThreads * kCalls; });
  EXPECT_EQ(good.load(), kThreads * kCalls);
  EXPECT_EQ(server_->counters().authenticated, 2u);  // the pool of two
}

TEST_F(RpcTest, WrongSecretIsRefusedAndTheServerGoesOn) {
  auto bad = Channel("another-secret-of-enough-length");
  absl::Status s = Echo(*bad, "x");
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_GE(server_->counters().refused, 1u);
  EXPECT_EQ(server_->counters().authenticated, 0u);
  auto good = Channel();
  EXPECT_TRUE(Echo(*good, "hello").ok());
}

TEST_F(RpcTest, GarbageTruncatedAndOversizedFramesCloseOnlyThatConnection) {
  auto good = Channel();
  ASSERT_TRUE(Echo(*good, "before").ok());
  {  // Garbage instead of a Hello.
    const int fd = RawConnect();
    const std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    ASSERT_GT(write(fd, junk.data(), junk.size()), 0);
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);
  }
  {  // An oversized frame before authenticating.
    const int fd = RawConnect();
    ASSERT_EQ(write(fd, "\x7f\xff\xff\xff\0\0\0\0", 8), 8);
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);
  }
  {  // Authenticated, then a frame that announces 1 GiB of payload.
    const int fd = RawAuthenticated();
    ASSERT_EQ(write(fd, "\0\0\0\0\x40\0\0\0", 8), 8);
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);
  }
  {  // Authenticated, then bytes that do not parse as a request.
    const int fd = RawAuthenticated();
    const std::string bad("\0\0\0\x04\0\0\0\0\xff\xff\xff\xff", 12);
    ASSERT_EQ(write(fd, bad.data(), bad.size()), 12);
    EXPECT_TRUE(ClosedByPeer(fd));
    close(fd);
  }
  {  // A truncated frame, then the peer hangs up.
    const int fd = RawAuthenticated();
    ASSERT_EQ(write(fd, "\0\0\0\x40\0\0\0\0abc", 11), 11);
    close(fd);
  }
  // Counted as the server closes the connection, which the client may see
  // first.
  EXPECT_TRUE(Eventually([&] { return server_->counters().bad_frames >= 2; }))
      << server_->counters().bad_frames;
  EXPECT_TRUE(Echo(*good, "after").ok());
}

TEST_F(RpcTest, AHandshakeThatNeverComesTimesOut) {
  server_.reset();
  RpcServer::Options o;
  o.name = "slow";
  o.secret = kSecret;
  o.handshake_timeout = absl::Milliseconds(100);
  server_ = *RpcServer::Start(&threads_, "127.0.0.1:0", o,
                              [](std::unique_ptr<RpcServer::Call>) {});
  const int fd = RawConnect();
  EXPECT_TRUE(ClosedByPeer(fd));  // within the 5 s read timeout
  close(fd);
  EXPECT_EQ(server_->counters().refused, 1u);
}

TEST_F(RpcTest, ACallWithoutReplyEndsAtItsDeadline) {
  auto ch = Channel();
  proto::RpcRequest req;
  req.mutable_io()->set_path("hold");
  const absl::Time start = absl::Now();
  auto r = ch->CallSync(req, absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(ch->outstanding(), 0u);
  // The late reply, once it comes, is ignored; the channel still works.
  {
    std::lock_guard<std::mutex> l(held_mu_);
    held_.clear();
  }
  EXPECT_TRUE(Echo(*ch, "still").ok());
}

TEST_F(RpcTest, AServerGoingAwayFailsOutstandingCallsAndComesBack) {
  auto ch = Channel();
  ASSERT_TRUE(Echo(*ch, "first").ok());
  const uint16_t port = server_->port();
  std::atomic<bool> finished{false};
  absl::Status held_status;
  std::thread waiter([&] {
    proto::RpcRequest req;
    req.mutable_io()->set_path("hold");
    held_status = ch->CallSync(req, absl::Seconds(30)).status();
    finished = true;
  });
  while (true) {
    std::lock_guard<std::mutex> l(held_mu_);
    if (!held_.empty()) break;
  }
  const absl::Time start = absl::Now();
  {
    std::lock_guard<std::mutex> l(held_mu_);
    held_.clear();  // replies "request dropped" before the server goes
  }
  server_.reset();
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_FALSE(held_status.ok());
  // No server: errors, quickly.
  absl::Status down = Echo(*ch, "down");
  EXPECT_TRUE(absl::IsUnavailable(down)) << down;
  // Back on the same port: calls work again after the backoff.
  StartServer(port);
  absl::Status s;
  EXPECT_TRUE(Eventually([&] {
    s = Echo(*ch, "again");
    return s.ok();
  })) << s;
}

TEST_F(RpcTest, NothingListeningIsUnavailable) {
  const uint16_t port = server_->port();
  server_.reset();
  RpcChannel::Options o;
  o.address = "127.0.0.1:" + std::to_string(port);
  o.secret = kSecret;
  auto ch = *RpcChannel::Create(&client_threads_, o);
  absl::Status s = ch->Connect(absl::Seconds(2));
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_NE(s.message().find("cannot connect"), std::string::npos) << s;
  StartServer(0);
}

// Adaptive polling (the daemons' default): a trickle of calls, each long
// after the one before, is not polled for; a stream of back-to-back calls
// is.
TEST(RpcPollingTest, AdaptivePollersPollOnlyWhileCallsFlow) {
  using std::chrono::microseconds;
  // A window of 2 ms: the trickle's calls, 20 ms apart, miss it by far; the
  // stream's round trips stay inside it even under TSan on a busy machine
  // (at 200 us they did not, once).
  IoThreads server_threads(2, microseconds(2000),
                           IoThreads::Polling::kAdaptive);
  IoThreads client_threads(1);
  EXPECT_EQ(server_threads.size(), 1);
  RpcServer::Options so;
  so.name = "adaptive";
  so.secret = kSecret;
  auto server = *RpcServer::Start(&server_threads, "127.0.0.1:0", so,
                                  [&](std::unique_ptr<RpcServer::Call> call) {
                                    proto::RpcReply reply;
                                    call->Reply(reply, call->payload());
                                  });
  RpcChannel::Options co;
  co.address = server->address();
  co.secret = kSecret;
  auto ch = *RpcChannel::Create(&client_threads, co);
  auto call = [&] {
    proto::RpcRequest req;
    req.mutable_io()->set_path("echo");
    std::string back;
    const std::string data = "x";
    auto r = ch->CallSync(req, absl::Seconds(10), data, &back);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && back == data;
  };
  ASSERT_TRUE(ch->Connect(absl::Seconds(2)).ok());
  ASSERT_TRUE(call());
  const uint64_t before_trickle = server_threads.poll_turns();
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(call());
  }
  // A poll turn or two while the share of hits falls (the connection's
  // first events came close together), not one per call.
  EXPECT_LE(server_threads.poll_turns() - before_trickle, 4u);
  const uint64_t before_stream = server_threads.poll_turns();
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(call());
  EXPECT_GT(server_threads.poll_turns() - before_stream, 100u);
}

// Polling network threads (rpc/io_threads.h) on both sides: calls from
// several threads come back, deadlines still fire, a thread that went to
// sleep after its window wakes for the next call, and Stop ends the poller.
TEST(RpcPollingTest, PollingThreadsServeCallsDeadlinesAndStop) {
  using std::chrono::microseconds;
  IoThreads server_threads(2, microseconds(300));
  IoThreads client_threads(2, microseconds(300));
  EXPECT_EQ(server_threads.size(), 1);  // one poller, whatever was asked
  std::mutex held_mu;
  std::vector<std::unique_ptr<RpcServer::Call>> held;
  RpcServer::Options so;
  so.name = "poller";
  so.secret = kSecret;
  auto server = *RpcServer::Start(&server_threads, "127.0.0.1:0", so,
                                  [&](std::unique_ptr<RpcServer::Call> call) {
                                    if (call->request().io().path() == "hold") {
                                      std::lock_guard<std::mutex> l(held_mu);
                                      held.push_back(std::move(call));
                                      return;
                                    }
                                    proto::RpcReply reply;
                                    call->Reply(reply, call->payload());
                                  });
  RpcChannel::Options co;
  co.address = server->address();
  co.secret = kSecret;
  auto ch = *RpcChannel::Create(&client_threads, co);

  std::atomic<int> good{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        proto::RpcRequest req;
        req.mutable_io()->set_path("echo");
        const std::string data = std::to_string(t * 1000 + i);
        std::string back;
        auto r = ch->CallSync(req, absl::Seconds(10), data, &back);
        if (r.ok() && back == data) good.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(good.load(), 600);

  proto::RpcRequest hold;
  hold.mutable_io()->set_path("hold");
  auto late = ch->CallSync(hold, absl::Milliseconds(100));
  EXPECT_TRUE(absl::IsDeadlineExceeded(late.status())) << late.status();

  // Long past the window: both pollers sleep, and the next call wakes them.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  proto::RpcRequest req;
  req.mutable_io()->set_path("echo");
  std::string back;
  const std::string again = "again";
  EXPECT_TRUE(ch->CallSync(req, absl::Seconds(5), again, &back).ok());
  EXPECT_EQ(back, "again");

  ch.reset();
  {
    std::lock_guard<std::mutex> l(held_mu);
    held.clear();
  }
  server.reset();
  client_threads.Stop();  // returns: the poller sees the context stop
  server_threads.Stop();
}

TEST(RpcAddressTest, BadAddressesAreClearErrors) {
  std::string host;
  uint16_t port;
  EXPECT_TRUE(SplitHostPort("127.0.0.1:80", &host, &port).ok());
  EXPECT_EQ(port, 80);
  EXPECT_TRUE(SplitHostPort("[::1]:9", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  for (const char* bad : {"nohost", ":80", "h:", "h:99999", "h:x"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(SplitHostPort(bad, &host, &port)))
        << bad;
  }
}

}  // namespace
}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: independent cases on one fixture (an sSwitch over
// scratch endpoints), which each file of a split would repeat.
#include "sswitch/sswitch.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "embed/embedded_host.h"
#include "endpoints/local_endpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "tests/util/rule_text.h"
#include "tests/util/temp_dir.h"
#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {
namespace {

using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;
using ::testing::HasSubstr;

using ::sroute::testing::P;
using ::sroute::testing::R;

std::span<const char> Bytes(const std::string& s) {
  return std::span<const char>(s.data(), s.size());
}

std::string ReadAll(EmbeddedHost& host, const std::string& file, size_t n,
                    uint64_t offset = 0, std::string_view source = "t") {
  std::string buf(n, '\0');
  auto got = host.Read(source, file, offset, std::span<char>(buf));
  EXPECT_TRUE(got.ok()) << file << ": " << got.status();
  buf.resize(got.ok() ? *got : 0);
  return buf;
}

// Fails every IO with `status` (error injection for scatter tests).
class FailingEndpoint : public Endpoint {
 public:
  explicit FailingEndpoint(absl::Status s) : status_(std::move(s)) {}
  void Submit(Io* io, std::string_view) override {
    ++calls;
    io->Complete(status_);
  }
  std::atomic<int> calls{0};

 private:
  absl::Status status_;
};

// Holds IOs until released, to keep them in flight.
class BlockingEndpoint : public Endpoint {
 public:
  void Submit(Io* io, std::string_view path) override {
    std::lock_guard<std::mutex> l(mu_);
    held_.emplace_back(io, std::string(path));
    cv_.notify_all();
  }
  void WaitHeld(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return held_.size() >= n; });
  }
  // Completes the held IOs on `path`.
  void Release(const std::string& path) {
    std::vector<Io*> out;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto it = held_.begin(); it != held_.end();) {
        if (it->second == path) {
          out.push_back(it->first);
          it = held_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (Io* io : out) io->Complete();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<Io*, std::string>> held_;
};

class RecordingSink : public ControllerSink {
 public:
  void OnHeader(const IoHeader& h, uint64_t) override {
    std::lock_guard<std::mutex> l(mu);
    headers.push_back(h.file);
  }
  void OnValue(const IoHeader&, uint64_t, const std::string& v) override {
    std::lock_guard<std::mutex> l(mu);
    values.push_back(v);
  }
  void OnIo(Io* io, uint64_t) override { io->Complete(); }
  std::mutex mu;
  std::vector<std::string> headers;
  std::vector<std::string> values;
};

class SSwitchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    extra_before_ = Io::extra_completions.load();
    ASSERT_TRUE(host_.AddLocalEndpoint("A", a_.path()).ok());
    ASSERT_TRUE(host_.AddLocalEndpoint("B", b_.path()).ok());
  }
  void TearDown() override {
    EXPECT_EQ(Io::extra_completions.load(), extra_before_)
        << "an IO completed more than once";
    EXPECT_EQ(host_.sswitch().in_flight(), 0);
  }

  TempDir a_, b_;
  EmbeddedHost host_{"test"};
  uint64_t extra_before_ = 0;
};

TEST_F(SSwitchTest, EmptyTableIsPassthrough) {
  const std::string data = "hello, world";
  auto n = host_.Write("t", "//A/dir/f", 0, Bytes(data));
  // The parent directory does not exist: the endpoint reports ENOENT.
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(ErrnoOf(n.status()), ENOENT);
  IoArgs args;
  args.mode = 0755;
  ASSERT_TRUE(host_.Call("t", Op::kMkdir, "//A/dir", args).ok());
  args.mode = 0644;
  args.open_flags = O_RDWR;
  ASSERT_TRUE(host_.Call("t", Op::kCreate, "//A/dir/f", args).ok());
  n = host_.Write("t", "//A/dir/f", 0, Bytes(data));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, data.size());
  EXPECT_EQ(ReadWholeFile(a_ / "dir/f"), data);
  EXPECT_EQ(ReadAll(host_, "//A/dir/f", 100), data);
  auto st = host_.Call("t", Op::kGetattr, "//A/dir/f");
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->st_size, static_cast<off_t>(data.size()));
}

TEST_F(SSwitchTest, EndpointRoutingSendsIoToAnotherFile) {
  WriteWholeFile(b_ / "y", "");
  ASSERT_TRUE(host_.LoadRules("<*, *, //A/x> -> <IO, //B/y>").ok());
  ASSERT_TRUE(host_.Write("t", "//A/x", 0, Bytes("routed")).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "y"), "routed");
  EXPECT_FALSE(std::filesystem::exists(a_ / "x"));
  EXPECT_EQ(ReadAll(host_, "//A/x", 10), "routed");
}

TEST_F(SSwitchTest, PrefixRuleKeepsTheMatchedSuffix) {
  WriteWholeFile(b_ / "vm/disk/1", "");
  ASSERT_TRUE(host_.LoadRules("<*, w|r, //A/vm/*> -> <IO, //B/vm/*>").ok());
  ASSERT_TRUE(host_.Write("t", "//A/vm/disk/1", 0, Bytes("abc")).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "vm/disk/1"), "abc");
  // Outside the prefix (component-wise): default route.
  WriteWholeFile(a_ / "vmx", "");
  ASSERT_TRUE(host_.Write("t", "//A/vmx", 0, Bytes("def")).ok());
  EXPECT_EQ(ReadWholeFile(a_ / "vmx"), "def");
}

TEST_F(SSwitchTest, ByteRangeSplitsAndCoalesces) {
  WriteWholeFile(a_ / "f", "");
  WriteWholeFile(b_ / "f", "");
  ASSERT_TRUE(host_.LoadRules("<*, *, //A/f[4K:8K]> -> <IO, //B/f>").ok());
  std::string data(12288, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  auto n = host_.Write("t", "//A/f", 0, Bytes(data));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, data.size());
  const std::string at_a = ReadWholeFile(a_ / "f");
  const std::string at_b = ReadWholeFile(b_ / "f");
  ASSERT_EQ(at_a.size(), 12288u);
  ASSERT_EQ(at_b.size(), 8192u);
  EXPECT_EQ(at_a.substr(0, 4096), data.substr(0, 4096));
  EXPECT_EQ(at_a.substr(8192), data.substr(8192));
  EXPECT_EQ(at_a.substr(4096, 4096), std::string(4096, '\0'));  // a hole
  EXPECT_EQ(at_b.substr(4096), data.substr(4096, 4096));
  // One read across the three pieces reassembles them in order.
  EXPECT_EQ(ReadAll(host_, "//A/f", 20000), data);
  EXPECT_EQ(ReadAll(host_, "//A/f", 4000, 3000), data.substr(3000, 4000));
}

TEST_F(SSwitchTest, SplitReadZeroFillsShortPiecesBeforeData) {
  // [0,4K) routed to B, where the file is empty; the rest at A has data.
  WriteWholeFile(b_ / "f", "");
  WriteWholeFile(a_ / "f", std::string(8192, 'a'));
  ASSERT_TRUE(host_.LoadRules("<*, r, //A/f[0:4K]> -> <IO, //B/f>").ok());
  std::string got(8192, '#');  // not zeros: the sSwitch must fill the hole
  auto n = host_.Read("t", "//A/f", 0, std::span<char>(got));
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(*n, 8192u);
  EXPECT_EQ(got.substr(0, 4096), std::string(4096, '\0'));
  EXPECT_EQ(got.substr(4096), std::string(4096, 'a'));
}

TEST_F(SSwitchTest, ScatterWritesLandOnEveryTarget) {
  WriteWholeFile(a_ / "f", "");
  WriteWholeFile(b_ / "f", "");
  ASSERT_TRUE(
      host_.LoadRules("<*, w, //A/f> -> <IO, //A/f>, <IO, //B/f>").ok());
  std::string data(100000, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i % 251);
  ASSERT_TRUE(host_.Write("t", "//A/f", 0, Bytes(data)).ok());
  EXPECT_EQ(ReadWholeFile(a_ / "f"), data);
  EXPECT_EQ(ReadWholeFile(b_ / "f"), data);
}

TEST_F(SSwitchTest, ScatterWriteReportsAnErrorFromAnyTarget) {
  auto bad = std::make_shared<FailingEndpoint>(ErrnoStatus(ENOSPC, "full"));
  ASSERT_TRUE(host_.AddEndpoint("Bad", bad).ok());
  WriteWholeFile(a_ / "f", "");
  ASSERT_TRUE(
      host_.LoadRules("<*, w, //A/f> -> <IO, //A/f>, <IO, //Bad/f>").ok());
  auto n = host_.Write("t", "//A/f", 0, Bytes("data"));
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(ErrnoOf(n.status()), ENOSPC);
  EXPECT_EQ(bad->calls.load(), 1);
  // The good target got it too: the write reached every target.
  EXPECT_EQ(ReadWholeFile(a_ / "f"), "data");
}

TEST_F(SSwitchTest, ScatterAckPolicyKOfN) {
  auto bad = std::make_shared<FailingEndpoint>(ErrnoStatus(EIO, "broken"));
  ASSERT_TRUE(host_.AddEndpoint("Bad", bad).ok());
  WriteWholeFile(a_ / "f", "");
  WriteWholeFile(b_ / "f", "");
  ASSERT_TRUE(host_
                  .LoadRules("<*, w, //A/f> -> <IO, //A/f>, <IO, //Bad/f>, "
                             "<IO, //B/f> ack=2")
                  .ok());
  EXPECT_TRUE(host_.Write("t", "//A/f", 0, Bytes("quorum")).ok());
  EXPECT_EQ(ReadWholeFile(a_ / "f"), "quorum");
  EXPECT_EQ(ReadWholeFile(b_ / "f"), "quorum");
  // 3 of 3 cannot be met with one broken target.
  ASSERT_TRUE(host_.sswitch().Delete(P("<*, w, //A/f>")).ok());
  ASSERT_TRUE(host_
                  .LoadRules("<*, w, //A/f> -> <IO, //A/f>, <IO, //Bad/f>, "
                             "<IO, //B/f> ack=3")
                  .ok());
  auto n = host_.Write("t", "//A/f", 0, Bytes("again"));
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(ErrnoOf(n.status()), EIO);
}

TEST_F(SSwitchTest, ScatterReadTakesTheFirstGoodReply) {
  auto bad = std::make_shared<FailingEndpoint>(ErrnoStatus(EIO, "broken"));
  ASSERT_TRUE(host_.AddEndpoint("Bad", bad).ok());
  WriteWholeFile(b_ / "f", "replica");
  ASSERT_TRUE(
      host_.LoadRules("<*, r, //A/f> -> <IO, //Bad/f>, <IO, //B/f>").ok());
  EXPECT_EQ(ReadAll(host_, "//A/f", 100), "replica");
  EXPECT_EQ(bad->calls.load(), 1);
}

// The first target answers at once, which completes the read, and the
// issuer frees the IO in its completion while the sSwitch still has the
// second target to send to: it must not touch the freed IO (ASan would
// report it).
TEST_F(SSwitchTest, ScatterReadMayFreeItsIoOnTheFirstReply) {
  auto bad = std::make_shared<FailingEndpoint>(ErrnoStatus(EIO, "broken"));
  ASSERT_TRUE(host_.AddEndpoint("Bad", bad).ok());
  WriteWholeFile(b_ / "f", "replica");
  ASSERT_TRUE(
      host_.LoadRules("<*, r, //A/f> -> <IO, //B/f>, <IO, //Bad/f>").ok());
  std::string buf(100, '\0');
  std::string got;
  auto* io = new Io;
  io->header.source = "t";
  io->header.op = Op::kRead;
  io->header.file = "//A/f";
  io->header.length = buf.size();
  io->read_buffer = std::span<char>(buf);
  io->set_completion([&](Io& done) {
    got = done.status.ok() ? buf.substr(0, done.bytes) : "error";
    delete &done;
  });
  host_.sswitch().Route(io);
  EXPECT_EQ(got, "replica");
  EXPECT_EQ(bad->calls.load(), 1);
}

TEST_F(SSwitchTest, PathsEscapingTheEndpointRootAreRefused) {
  WriteWholeFile(a_ / "ok", "fine");
  std::string buf(100, '\0');
  for (const char* file :
       {"//A/../etc/passwd", "//A/a/../../etc/passwd", "//A//etc/passwd"}) {
    auto got = host_.Read("t", file, 0, std::span<char>(buf));
    EXPECT_FALSE(got.ok()) << file;
  }
  std::filesystem::create_symlink("/etc", a_ / "link");
  auto got = host_.Read("t", "//A/link/passwd", 0, std::span<char>(buf));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(ErrnoOf(got.status()), EXDEV);
  // Rules cannot name such paths either.
  EXPECT_FALSE(ParseRule("<*, *, //A/x> -> <IO, //B/../x>").ok());
}

TEST_F(SSwitchTest, RenameRoutesBothNamesAndRefusesToCrossEndpoints) {
  std::filesystem::create_directories(b_ / "vm");
  WriteWholeFile(b_ / "vm/x", "disk");
  ASSERT_TRUE(host_.LoadRules("<*, *, //A/vm/*> -> <IO, //B/vm/*>").ok());
  IoArgs args;
  args.second_file = "//A/vm/y";
  ASSERT_TRUE(host_.Call("t", Op::kRenameFrom, "//A/vm/x", args).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "vm/y"), "disk");
  EXPECT_FALSE(std::filesystem::exists(b_ / "vm/x"));
  // //A/top routes to A itself: the two names are on different endpoints.
  args.second_file = "//A/top";
  auto r = host_.Call("t", Op::kRenameFrom, "//A/vm/y", args);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrnoOf(r.status()), EXDEV);
  EXPECT_TRUE(std::filesystem::exists(b_ / "vm/y"));
  // Links follow the same rule.
  args.second_file = "//A/vm/y";
  ASSERT_TRUE(host_.Call("t", Op::kLink, "//A/vm/z", args).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "vm/z"), "disk");
  r = host_.Call("t", Op::kLink, "//A/elsewhere", args);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(ErrnoOf(r.status()), EXDEV);
}

TEST_F(SSwitchTest, CreatesAtADetourMakeTheMissingParents) {
  ASSERT_TRUE(
      host_.LoadRules("<*, c|w|r, //A/new/*> -> <IO, //B/deep/*>").ok());
  IoArgs args;
  args.mode = 0640;
  args.open_flags = O_RDWR;
  auto st = host_.Call("t", Op::kCreate, "//A/new/x/y/file", args);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(S_ISREG(st->st_mode));
  EXPECT_TRUE(std::filesystem::is_regular_file(b_ / "deep/x/y/file"));
  ASSERT_TRUE(host_.Write("t", "//A/new/x/y/file", 0, Bytes("deep")).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "deep/x/y/file"), "deep");
  args.mode = 0755;
  ASSERT_TRUE(host_.Call("t", Op::kMkdir, "//A/new/q/r", args).ok());
  EXPECT_TRUE(std::filesystem::is_directory(b_ / "deep/q/r"));
  // At its own name a missing parent is still an error.
  auto own = host_.Call("t", Op::kMkdir, "//A/none/r", args);
  ASSERT_FALSE(own.ok());
  EXPECT_EQ(ErrnoOf(own.status()), ENOENT);
}

TEST_F(SSwitchTest, InsertValidatesTargetsAndDelegates) {
  auto id = host_.sswitch().Insert(R("<*, *, //A/x> -> <IO, //Nowhere/x>"));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("Nowhere"));
  id = host_.sswitch().Insert(R("<*, *, //A/x> -> frobnicate(); <IO, //B/x>"));
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(std::string(id.status().message()),
              HasSubstr("unknown delegate 'frobnicate'"));
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("track_writes"));
  id = host_.sswitch().Insert(
      R("<*, *, //A/x> -> pick(weighted, 1); <IO, //A/x>, <IO, //B/x>"));
  ASSERT_FALSE(id.ok());
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("weight"));
  id = host_.sswitch().Insert(R("<*, *, //A/x> -> <IO, stage:missing>"));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(host_.sswitch().ListRules().size(), 0u);
}

TEST_F(SSwitchTest, RuleIdsOwnersAndDelete) {
  auto& sw = host_.sswitch();
  auto id1 = sw.Insert(R("<*, r, //A/x> -> <IO, //B/x>"), "app1");
  auto id2 = sw.Insert(R("@5 <*, w, //A/x> -> <IO, //B/x>"));
  ASSERT_TRUE(id1.ok() && id2.ok());
  EXPECT_NE(*id1, *id2);
  auto rules = sw.ListRules();
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0].id, *id2);  // higher priority first
  EXPECT_EQ(
      FormatRuleInfo(rules[1]),
      std::to_string(*id1) + ": <*, r, //A/x> -> <IO, //B/x>  # owner=app1");
  EXPECT_TRUE(sw.Delete(*id1).ok());
  EXPECT_EQ(sw.Delete(*id1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(sw.ListRules().size(), 1u);
  EXPECT_EQ(*sw.Delete(P("<*, w, //A/x>")), 1);
  EXPECT_EQ(sw.ListRules().size(), 0u);
}

TEST_F(SSwitchTest, UpdateIsAllOrNothing) {
  auto& sw = host_.sswitch();
  auto id = sw.Insert(R("<*, r, //A/x> -> <IO, //B/x>"));
  ASSERT_TRUE(id.ok());
  const uint64_t v = sw.version();
  std::vector<Rule> insert = {R("<*, w, //A/x> -> <IO, //B/x>"),
                              R("<*, w, //A/y> -> <IO, //Nope/y>")};
  EXPECT_FALSE(sw.Update(insert, {*id}).ok());
  EXPECT_EQ(sw.version(), v);
  ASSERT_EQ(sw.ListRules().size(), 1u);
  EXPECT_EQ(sw.ListRules()[0].id, *id);
}

TEST_F(SSwitchTest, LoadRulesReportsFileLineAndColumn) {
  absl::Status s = host_.LoadRules(
      "# demo\n<*, r, //A/x> -> <IO, //B/x>\n<*, q, //A/y> -> <IO, //B/y>\n",
      "demo.rules");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("demo.rules:3:5: "));
  s = host_.LoadRules(
      "<*, r, //A/x> -> <IO, //B/x>\n<*, r, //A/y> -> <IO, //Z/y>",
      "demo.rules");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("demo.rules:2: "));
  EXPECT_EQ(host_.sswitch().ListRules().size(), 0u) << "rolled back";
}

TEST_F(SSwitchTest, CountersPerRule) {
  WriteWholeFile(b_ / "x", std::string(4096, 'b'));
  ASSERT_TRUE(host_.LoadRules("<*, r, //A/x> -> <IO, //B/x>").ok());
  for (int i = 0; i < 10; ++i) ReadAll(host_, "//A/x", 4096);
  auto rules = host_.sswitch().ListRules();
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].counters.ops, 10u);
  EXPECT_EQ(rules[0].counters.bytes, 40960u);
  EXPECT_EQ(rules[0].counters.in_flight, 0);
  EXPECT_EQ(rules[0].counters.errors, 0u);
  EXPECT_GT(rules[0].counters.p50_ns, 0u);
  EXPECT_GE(rules[0].counters.p99_ns, rules[0].counters.p50_ns);
  EXPECT_GE(rules[0].counters.p999_ns, rules[0].counters.p99_ns);
}

// Threads update a rule's counters in slots of their own; reads add the
// slots up, and an IO started on one thread may finish on another.
TEST(RuleCountersTest, SumsTheSlotsOfManyThreads) {
  RuleCounters c;
  EXPECT_EQ(c.ops(), 0u);
  EXPECT_EQ(c.Read().ops, 0u);
  LatencyHistogram::Counts counts;
  c.LatencyCounts(&counts);
  EXPECT_TRUE(counts.empty());

  constexpr int kThreads = 20;  // more than there are slots: some share
  constexpr int kPerThread = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&c, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const OpClass cls = i % 2 == 0 ? kOpClassRead : kOpClassWrite;
        c.Start(cls);
        c.Finish(cls, 4096, i % 100 == 0, t % 2 == 0 ? 1000 : 1000000);
      }
    });
  }
  for (auto& th : threads) th.join();
  // One IO started here and finished on another thread; one still open.
  c.Start(kOpClassCreate);
  std::thread([&c] { c.Finish(kOpClassCreate, 0, true, 500); }).join();
  c.Start(kOpClassRead);

  const RuleCountersSnapshot s = c.Read();
  const uint64_t half = uint64_t{kThreads} * kPerThread / 2;
  EXPECT_EQ(s.reads, half + 1);
  EXPECT_EQ(s.writes, half);
  EXPECT_EQ(s.others, 1u);
  EXPECT_EQ(s.ops, 2 * half + 2);
  EXPECT_EQ(c.ops(), s.ops);
  EXPECT_EQ(s.read_bytes, half * 4096);
  EXPECT_EQ(s.write_bytes, half * 4096);
  EXPECT_EQ(s.bytes, 2 * half * 4096);
  EXPECT_EQ(s.errors, uint64_t{kThreads} * kPerThread / 100 + 1);
  EXPECT_EQ(s.in_flight, 1);
  // Half the latencies 1 us, half 1 ms (and one 500 ns): the histograms of
  // every slot count.
  EXPECT_GE(s.p50_ns, 1000u);
  EXPECT_LT(s.p50_ns, 1200u);
  EXPECT_GE(s.p99_ns, 1000000u);
  EXPECT_LT(s.p99_ns, 1200000u);
  c.LatencyCounts(&counts);
  uint64_t recorded = 0;
  for (const auto& [bucket, n] : counts) recorded += n;
  EXPECT_EQ(recorded, 2 * half + 1);
  EXPECT_EQ(c.Read(/*percentiles=*/false).p50_ns, 0u);
}

TEST_F(SSwitchTest, CountersByOpClassAndLatencyOfAnInterval) {
  WriteWholeFile(b_ / "x", "");
  ASSERT_TRUE(host_.LoadRules("<*, *, //A/x> -> <IO, //B/x>").ok());
  const std::string block(1000, 'w');
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(host_.Write("t", "//A/x", i * 1000, Bytes(block)).ok());
  }
  ReadAll(host_, "//A/x", 3000);
  ASSERT_TRUE(host_.Call("t", Op::kGetattr, "//A/x").ok());
  ASSERT_TRUE(host_.Call("t", Op::kUnlink, "//A/x").ok());
  auto c = host_.sswitch().ListRules()[0].counters;
  EXPECT_EQ(c.reads, 2u);  // the read and the getattr
  EXPECT_EQ(c.writes, 3u);
  EXPECT_EQ(c.others, 1u);  // the unlink
  EXPECT_EQ(c.ops, 6u);
  EXPECT_EQ(c.write_bytes, 3000u);
  EXPECT_EQ(c.read_bytes, 3000u);
  // VisitCounters sees the same live counters.
  uint64_t seen = 0;
  LatencyHistogram::Counts before, now;
  host_.sswitch().VisitCounters(
      [&](uint64_t, const std::string&, const RuleCounters& rc) {
        seen += rc.ops();
        rc.LatencyCounts(&before);
      });
  EXPECT_EQ(seen, 6u);
  // Percentiles of an interval: only what was recorded after `before`.
  LatencyHistogram h;
  for (int i = 0; i < 100; ++i) h.Record(1000);  // 1 us
  h.NonZero(&before);
  for (int i = 0; i < 100; ++i) h.Record(1000000);  // 1 ms
  h.NonZero(&now);
  const uint64_t p50 = LatencyHistogram::PercentileOfGrowth(before, now, 0.5);
  EXPECT_GE(p50, 1000000u);
  EXPECT_LT(p50, 1200000u);
  EXPECT_LT(h.Percentile(0.4), 2000u);  // the whole history is mostly 1 us
  EXPECT_EQ(LatencyHistogram::PercentileOfGrowth(now, now, 0.5), 0u);
}

TEST_F(SSwitchTest, PickFirstRandomAndWeighted) {
  WriteWholeFile(a_ / "x", "AAAA");
  WriteWholeFile(b_ / "x", "BBBB");
  auto& sw = host_.sswitch();
  ASSERT_TRUE(
      host_.LoadRules("<*, r, //A/x> -> pick(first); <IO, //B/x>, <IO, //A/x>")
          .ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ReadAll(host_, "//A/x", 4), "BBBB");
  ASSERT_EQ(*sw.Delete(P("<*, r, //A/x>")), 1);
  ASSERT_TRUE(
      host_.LoadRules("<*, r, //A/x> -> pick(random); <IO, //A/x>, <IO, //B/x>")
          .ok());
  std::map<std::string, int> seen;
  for (int i = 0; i < 200; ++i) ++seen[ReadAll(host_, "//A/x", 4)];
  EXPECT_GT(seen["AAAA"], 20);
  EXPECT_GT(seen["BBBB"], 20);
  ASSERT_EQ(*sw.Delete(P("<*, r, //A/x>")), 1);
  ASSERT_TRUE(host_
                  .LoadRules("<*, r, //A/x> -> pick(weighted, 1, 1000); "
                             "<IO, //A/x>, <IO, //B/x>")
                  .ok());
  seen.clear();
  for (int i = 0; i < 300; ++i) ++seen[ReadAll(host_, "//A/x", 4)];
  EXPECT_GT(seen["BBBB"], 280);
}

TEST_F(SSwitchTest, ControllerDetours) {
  auto sink = std::make_shared<RecordingSink>();
  WriteWholeFile(a_ / "x", "x");
  // Without a controller an IO detoured to it fails clearly.
  ASSERT_TRUE(host_.LoadRules("<*, w, //A/y> -> <IO, controller>").ok());
  auto n = host_.Write("t", "//A/y", 0, Bytes("zz"));
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable);
  host_.sswitch().SetControllerSink(sink);
  EXPECT_TRUE(host_.Write("t", "//A/y", 0, Bytes("zz")).ok());
  ASSERT_TRUE(host_
                  .LoadRules("<*, r, //A/x> -> <IOHeader, controller>\n"
                             "<*, w, //A/x> -> notify(); <F, controller>, "
                             "<IO, //A/x>")
                  .ok());
  EXPECT_EQ(ReadAll(host_, "//A/x", 10), "x");  // the IO itself goes on
  EXPECT_TRUE(host_.Write("t", "//A/x", 0, Bytes("w")).ok());
  std::lock_guard<std::mutex> l(sink->mu);
  EXPECT_EQ(sink->headers, std::vector<std::string>{"//A/x"});
  ASSERT_EQ(sink->values.size(), 1u);
  EXPECT_THAT(sink->values[0], HasSubstr("write, //A/x, 0, 1>"));
}

// Passes IOs on and stamps the response path.
class CountingStage : public Stage {
 public:
  void Submit(Io* io, const Forward& forward) override {
    ++requests;
    io->AddResponseHook([this](Io&) { ++responses; });
    forward(io);
  }
  std::atomic<int> requests{0}, responses{0};
};

// A replaced snapshot (here: the one holding a controller sink) lives on in
// the IOs routed with it, and not a moment longer: routing threads pin
// snapshots per shard, and a publish drops those pins.
TEST_F(SSwitchTest, AReplacedSnapshotLivesOnlyAsLongAsItsIos) {
  auto blocking = std::make_shared<BlockingEndpoint>();
  ASSERT_TRUE(host_.AddEndpoint("Slow", blocking).ok());
  auto sink = std::make_shared<RecordingSink>();
  std::weak_ptr<RecordingSink> watched = sink;
  host_.sswitch().SetControllerSink(std::move(sink));
  // Routed on this thread: its shard pins the snapshot with the sink.
  WriteWholeFile(a_ / "pinned", "");
  ASSERT_TRUE(host_.Write("t", "//A/pinned", 0, Bytes("x")).ok());
  auto io = std::make_unique<Io>();
  io->header.source = "t";
  io->header.op = Op::kGetattr;
  io->header.file = "//Slow/held";
  std::atomic<bool> done{false};
  io->set_completion([&](Io&) { done = true; });
  host_.sswitch().Route(io.get());
  blocking->WaitHeld(1);
  host_.sswitch().SetControllerSink(nullptr);
  EXPECT_FALSE(watched.expired()) << "the IO in flight still uses it";
  blocking->Release("held");
  EXPECT_TRUE(done.load());
  io.reset();  // an Io holds its snapshot until it is freed
  EXPECT_TRUE(watched.expired()) << "the shard's pin outlived the snapshot";
}

TEST_F(SSwitchTest, StagesForwardAndSeeTheResponse) {
  auto stage = std::make_shared<CountingStage>();
  ASSERT_TRUE(host_.AddStage("S", stage).ok());
  WriteWholeFile(a_ / "x", "");
  WriteWholeFile(b_ / "x", "");
  ASSERT_TRUE(host_
                  .LoadRules("<*, w, //A/x> -> <IO, stage:S>\n"
                             "<stage:S, w, //A/x> -> <IO, //B/x>")
                  .ok());
  ASSERT_TRUE(host_.Write("t", "//A/x", 0, Bytes("via stage")).ok());
  EXPECT_EQ(stage->requests.load(), 1);
  EXPECT_EQ(stage->responses.load(), 1);
  EXPECT_EQ(ReadWholeFile(b_ / "x"), "via stage");
  // A loop through a stage ends with ELOOP instead of spinning.
  ASSERT_TRUE(host_
                  .LoadRules("<stage:S, r, //A/x> -> <IO, stage:S>\n"
                             "<*, r, //A/x> -> <IO, stage:S>")
                  .ok());
  std::string buf(10, '\0');
  auto got = host_.Read("t", "//A/x", 0, std::span<char>(buf));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(ErrnoOf(got.status()), ELOOP);
}

TEST_F(SSwitchTest, QuiescedIosParkWithoutBlockingAndReleaseInOrder) {
  WriteWholeFile(a_ / "q", "");
  WriteWholeFile(a_ / "other", "o");
  auto& sw = host_.sswitch();
  ASSERT_TRUE(sw.Quiesce(P("<*, w, //A/q>"), true).ok());
  constexpr int kIos = 5;
  std::vector<std::unique_ptr<Io>> ios;
  std::vector<std::string> payload;
  std::mutex mu;
  std::vector<int> completed;
  for (int i = 0; i < kIos; ++i) payload.push_back(std::string(1, 'a' + i));
  for (int i = 0; i < kIos; ++i) {
    auto io = std::make_unique<Io>();
    io->header = {"t", "", Op::kWrite, "//A/q", static_cast<uint64_t>(i), 1};
    io->write_data = Bytes(payload[i]);
    io->set_completion([&, i](Io& done) {
      EXPECT_TRUE(done.status.ok()) << done.status;
      std::lock_guard<std::mutex> l(mu);
      completed.push_back(i);
    });
    sw.Route(io.get());  // returns at once: the IO is parked
    ios.push_back(std::move(io));
  }
  EXPECT_EQ(sw.parked(), static_cast<size_t>(kIos));
  EXPECT_TRUE(completed.empty());
  EXPECT_EQ(sw.in_flight(), 0);
  // Other flows go on.
  EXPECT_EQ(ReadAll(host_, "//A/other", 10), "o");
  // A read of the quiesced file is not a write: it is not parked either.
  EXPECT_EQ(ReadAll(host_, "//A/q", 10), "");
  ASSERT_TRUE(sw.Quiesce(P("<*, w, //A/q>"), false).ok());
  EXPECT_EQ(completed, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(ReadWholeFile(a_ / "q"), "abcde");
  EXPECT_EQ(sw.Quiesce(P("<*, w, //A/q>"), false).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SSwitchTest, QuiesceParksIosFromOtherThreads) {
  WriteWholeFile(a_ / "q", "");
  auto& sw = host_.sswitch();
  ASSERT_TRUE(sw.Quiesce(P("<*, *, //A/q>"), true).ok());
  std::atomic<bool> done{false};
  std::thread writer([&] {
    // EmbeddedHost::Write blocks this thread until the IO completes.
    EXPECT_TRUE(host_.Write("t", "//A/q", 0, Bytes("late")).ok());
    done = true;
  });
  while (sw.parked() == 0) std::this_thread::yield();
  EXPECT_FALSE(done.load());
  ASSERT_TRUE(sw.Quiesce(P("<*, *, //A/q>"), false).ok());
  writer.join();
  EXPECT_TRUE(done.load());
  EXPECT_EQ(ReadWholeFile(a_ / "q"), "late");
}

// parked() while quiesces come and go: each publishes a snapshot and frees
// the one before; parked() must hold the one it counts (a range-for over
// Load()->quiesced did not: a heap use-after-free under ASan, and once a
// corrupted heap in CI).
TEST_F(SSwitchTest, ParkedIsSafeWhileQuiescesChange) {
  auto& sw = host_.sswitch();
  std::atomic<bool> stop{false};
  std::thread toggler([&] {
    for (int i = 0; i < 20000; ++i) {
      const std::string p = "<*, *, //A/t" + std::to_string(i % 3) + ">";
      ASSERT_TRUE(sw.Quiesce(P(p), true).ok());
      ASSERT_TRUE(sw.Quiesce(P(p), false).ok());
    }
    stop = true;
  });
  size_t calls = 0;
  while (!stop.load()) {
    EXPECT_EQ(sw.parked(), 0u);
    ++calls;
  }
  toggler.join();
  EXPECT_GT(calls, 0u);
}

TEST_F(SSwitchTest, DrainWaitsForMatchingIosOnly) {
  auto blocking = std::make_shared<BlockingEndpoint>();
  ASSERT_TRUE(host_.AddEndpoint("Slow", blocking).ok());
  auto& sw = host_.sswitch();
  Io x, y;
  x.header = {"t", "", Op::kWrite, "//Slow/x", 0, 0};
  y.header = {"t", "", Op::kWrite, "//Slow/y", 0, 0};
  std::atomic<int> completions{0};
  x.set_completion([&](Io&) { ++completions; });
  y.set_completion([&](Io&) { ++completions; });
  sw.Route(&x);
  sw.Route(&y);
  blocking->WaitHeld(2);
  EXPECT_EQ(sw.in_flight(), 2);
  // Times out while x is in flight.
  absl::Status s = sw.Drain(P("<*, *, //Slow/x>"), absl::Milliseconds(20));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("1 IO(s) still in flight"));
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    EXPECT_TRUE(sw.Drain(P("<*, *, //Slow/x>"), absl::Seconds(30)).ok());
    drained = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(drained.load());
  blocking->Release("x");
  drainer.join();
  EXPECT_TRUE(drained.load());
  EXPECT_EQ(completions.load(), 1);  // y is still in flight: not waited for
  EXPECT_TRUE(sw.Drain(P("<*, *, //Slow/x>"), absl::Seconds(1)).ok());
  blocking->Release("y");
  EXPECT_EQ(completions.load(), 2);
}

TEST_F(SSwitchTest, QuiesceAndDrainGiveAConsistentSwitch) {
  // The sRoute update: quiesce, drain, change the rule, release. Writes in
  // flight finish on the old path; parked ones take the new one.
  auto blocking = std::make_shared<BlockingEndpoint>();
  ASSERT_TRUE(host_.AddEndpoint("Old", blocking).ok());
  WriteWholeFile(b_ / "f", "");
  auto& sw = host_.sswitch();
  auto old_rule = sw.Insert(R("<*, w, //A/f> -> <IO, //Old/f>"));
  ASSERT_TRUE(old_rule.ok());
  Io first;
  first.header = {"t", "", Op::kWrite, "//A/f", 0, 0};
  std::atomic<int> done{0};
  first.set_completion([&](Io&) { ++done; });
  sw.Route(&first);
  blocking->WaitHeld(1);
  ASSERT_TRUE(sw.Quiesce(P("<*, w, //A/f>"), true).ok());
  Io second;
  std::string data = "new";
  second.header = {"t", "", Op::kWrite, "//A/f", 0, 3};
  second.write_data = Bytes(data);
  second.set_completion([&](Io&) { ++done; });
  sw.Route(&second);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    blocking->Release("f");
  });
  ASSERT_TRUE(sw.Drain(P("<*, w, //A/f>"), absl::Seconds(30)).ok());
  releaser.join();
  EXPECT_EQ(done.load(), 1);
  ASSERT_TRUE(sw.Delete(*old_rule).ok());
  ASSERT_TRUE(sw.Insert(R("<*, w, //A/f> -> <IO, //B/f>")).ok());
  ASSERT_TRUE(sw.Quiesce(P("<*, w, //A/f>"), false).ok());
  EXPECT_EQ(done.load(), 2);
  EXPECT_EQ(first.target, "//Old/f");
  EXPECT_EQ(second.target, "//B/f");
  EXPECT_GT(second.routed_version(), first.routed_version());
  EXPECT_EQ(ReadWholeFile(b_ / "f"), "new");
}

TEST_F(SSwitchTest, SplitPiecesOfOneIoSeeOneVersion) {
  auto& sw = host_.sswitch();
  // Endpoints that record (io parent address, endpoint id) per piece.
  struct Tagging : Endpoint {
    Tagging(int id, std::mutex* mu, std::map<const char*, std::set<int>>* seen)
        : id(id), mu(mu), seen(seen) {}
    void Submit(Io* io, std::string_view) override {
      {
        std::lock_guard<std::mutex> l(*mu);
        // Pieces of one IO share the parent's read buffer: key by the
        // buffer's base (piece offset subtracted).
        (*seen)[io->read_buffer.data() - (io->header.offset - 2048)].insert(id);
      }
      io->bytes = io->header.length;
      io->Complete();
    }
    int id;
    std::mutex* mu;
    std::map<const char*, std::set<int>>* seen;
  };
  std::mutex mu;
  std::map<const char*, std::set<int>> seen;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(sw.AddEndpoint("T" + std::to_string(i),
                               std::make_shared<Tagging>(i, &mu, &seen))
                    .ok());
  }
  auto make_rules = [](int e) {
    const std::string t = "//T" + std::to_string(e) + "/f";
    return std::vector<Rule>{R("<*, r, //A/f[0:4K]> -> <IO, " + t + ">"),
                             R("<*, r, //A/f[4K:8K]> -> <IO, " + t + ">")};
  };
  auto ids = sw.Update(make_rules(0), {});
  ASSERT_TRUE(ids.ok());
  std::atomic<bool> stop{false};
  std::atomic<int> checked{0}, mixed{0}, updates{0};
  // Rules change continuously while three threads each route 2000 IOs, and
  // go on until the rules changed at least 50 times (whatever the timing).
  std::thread updater([&] {
    for (int k = 1; !stop.load(); ++k) {
      auto next = sw.Update(make_rules(k % 4), *ids);
      ASSERT_TRUE(next.ok()) << next.status();
      ids = std::move(next);
      ++updates;
    }
  });
  std::vector<std::thread> routers;
  std::atomic<int> routed{0};
  for (int t = 0; t < 3; ++t) {
    routers.emplace_back([&] {
      std::vector<char> buf(4096);
      for (int i = 0; i < 2000 || updates.load() < 50; ++i) {
        ++routed;
        Io io;
        io.header = {"t", "", Op::kRead, "//A/f", 2048, 4096};
        io.read_buffer = std::span<char>(buf);
        std::atomic<bool> done{false};
        io.set_completion([&](Io&) { done = true; });
        sw.Route(&io);
        while (!done.load()) std::this_thread::yield();
        std::lock_guard<std::mutex> l(mu);
        auto it = seen.find(buf.data());
        ASSERT_NE(it, seen.end());
        if (it->second.size() != 1) ++mixed;
        seen.erase(it);
        ++checked;
      }
    });
  }
  for (auto& t : routers) t.join();
  stop = true;
  updater.join();
  EXPECT_GE(updates.load(), 50);
  EXPECT_GE(routed.load(), 6000);
  EXPECT_EQ(checked.load(), routed.load());
  EXPECT_EQ(mixed.load(), 0);
}

// Randomized: writes routed by track_writes to another endpoint, reads
// anywhere, the write target switched back and forth; every read returns
// what a byte-array model says.
TEST_F(SSwitchTest, TrackWritesReadsTheLastWrittenBytes) {
  constexpr size_t kSize = 256 * 1024;
  std::mt19937_64 rng(42);
  std::string model(kSize, '\0');
  for (char& c : model) c = static_cast<char>(rng());
  WriteWholeFile(a_ / "vhd", model);
  WriteWholeFile(b_ / "tmp", "");
  auto& sw = host_.sswitch();
  auto write_rule =
      sw.Insert(R("<*, w, //A/vhd> -> track_writes(); <IO, //B/tmp>"));
  ASSERT_TRUE(write_rule.ok()) << write_rule.status();
  for (int step = 0; step < 3000; ++step) {
    if (step % 1000 == 500) {
      // Reclaim: writes go home again; tracked ranges follow new writes.
      const bool home = (step / 1000) % 2 == 0;
      ASSERT_TRUE(sw.Delete(*write_rule).ok());
      write_rule = sw.Insert(
          R(home ? "<*, w, //A/vhd> -> track_writes(); <IO, //A/vhd>"
                 : "<*, w, //A/vhd> -> track_writes(); <IO, //B/tmp>"));
      ASSERT_TRUE(write_rule.ok());
    }
    const uint64_t off = rng() % kSize;
    const uint64_t len = 1 + rng() % std::min<uint64_t>(16384, kSize - off);
    if (rng() % 2 == 0) {
      std::string data(len, '\0');
      for (char& c : data) c = static_cast<char>(rng());
      auto n = host_.Write("t", "//A/vhd", off, Bytes(data));
      ASSERT_TRUE(n.ok()) << n.status();
      ASSERT_EQ(*n, len);
      model.replace(off, len, data);
    } else {
      ASSERT_EQ(ReadAll(host_, "//A/vhd", len, off), model.substr(off, len))
          << "step " << step << " read [" << off << ", " << off + len << ")";
    }
  }
  EXPECT_EQ(ReadAll(host_, "//A/vhd", kSize), model);
  // Ranges merge and split: far fewer rules than writes.
  EXPECT_LT(sw.ListRules().size(), 1500u);
}

// track_writes(spread): each write lands on one target, by its 1 MiB chunk;
// reads follow every range to the target that holds it.
TEST_F(SSwitchTest, TrackWritesSpreadSendsEachChunkToOneTarget) {
  constexpr size_t kSize = 8 << 20;
  std::mt19937_64 rng(5);
  std::string model(kSize, 'o');
  WriteWholeFile(a_ / "vhd", model);
  std::filesystem::create_directories(b_ / "s1");
  std::filesystem::create_directories(b_ / "s2");
  WriteWholeFile(b_ / "s1/vhd", "");
  WriteWholeFile(b_ / "s2/vhd", "");
  auto& sw = host_.sswitch();
  EXPECT_FALSE(
      sw.Insert(R("<*, w, //A/vhd> -> track_writes(spread, home); <IO, //B/x>"))
          .ok());
  ASSERT_TRUE(sw.Insert(R("<*, w, //A/vhd> -> track_writes(spread); "
                          "<IO, //B/s1/vhd>, <IO, //B/s2/vhd>"))
                  .ok());
  // Writes up to 96 KiB, inside a chunk (the last 100 across chunks too).
  auto write = [&](int i, bool across) {
    uint64_t off = rng() % (kSize - 96 * 1024);
    uint64_t len = 1 + rng() % (96 * 1024);
    if (!across && (off >> 20) != ((off + len - 1) >> 20)) {
      len = (((off >> 20) + 1) << 20) - off;
    }
    const std::string data(len, static_cast<char>('a' + i % 26));
    ASSERT_TRUE(host_.Write("t", "//A/vhd", off, Bytes(data)).ok());
    model.replace(off, data.size(), data);
  };
  for (int i = 0; i < 400; ++i) write(i, false);
  EXPECT_EQ(ReadAll(host_, "//A/vhd", kSize), model);
  // Both targets took writes; the home file none.
  EXPECT_GT(std::filesystem::file_size(b_ / "s1/vhd"), 0u);
  EXPECT_GT(std::filesystem::file_size(b_ / "s2/vhd"), 0u);
  EXPECT_EQ(ReadWholeFile(a_ / "vhd"), std::string(kSize, 'o'));
  // Every read rule starting in a chunk names that chunk's one target.
  std::map<uint64_t, std::set<std::string>> targets_of_chunk;
  for (const RuleInfo& r : sw.ListRules()) {
    if (!r.owner.starts_with("delegate:")) continue;
    ASSERT_EQ(r.rule.detours.size(), 1u) << FormatRule(r.rule);
    targets_of_chunk[r.rule.pattern.file.range->start >> 20].insert(
        r.rule.detours[0].target.file);
  }
  std::set<std::string> all;
  for (const auto& [chunk, targets] : targets_of_chunk) {
    EXPECT_EQ(targets.size(), 1u) << "chunk " << chunk;
    all.insert(targets.begin(), targets.end());
  }
  EXPECT_EQ(all, (std::set<std::string>{"//B/s1/vhd", "//B/s2/vhd"}));
  for (int i = 400; i < 500; ++i) write(i, true);
  EXPECT_EQ(ReadAll(host_, "//A/vhd", kSize), model);
}

// An endpoint that keeps the delegate records of the writes it stores, as a
// storage server does.
class RecordKeepingEndpoint : public Endpoint {
 public:
  explicit RecordKeepingEndpoint(std::shared_ptr<Endpoint> inner)
      : inner_(std::move(inner)) {}
  void Submit(Io* io, std::string_view path) override {
    if (!io->records.empty()) {
      io->AddResponseHook([this](Io& done) {
        if (!done.status.ok()) return;
        std::lock_guard<std::mutex> l(mu);
        kept.insert(kept.end(), done.records.begin(), done.records.end());
      });
    }
    inner_->Submit(io, path);
  }
  std::mutex mu;
  std::vector<DelegateRuleRecord> kept;

 private:
  std::shared_ptr<Endpoint> inner_;
};

// A local endpoint on `dir` that keeps its writes' records.
std::shared_ptr<RecordKeepingEndpoint> KeepingRecords(const std::string& dir) {
  return std::make_shared<RecordKeepingEndpoint>(*LocalEndpoint::Open(dir));
}

std::set<std::string> DelegateRules(SSwitch& sw) {
  std::set<std::string> out;
  for (const RuleInfo& r : sw.ListRules()) {
    if (r.owner.starts_with("delegate:")) out.insert(FormatRule(r.rule));
  }
  return out;
}

// Writes through track_writes leave records where they land; a new sSwitch
// with the same rules, given those records, routes every read where the
// first one did.
TEST(TrackWritesRestoreTest, RecordsRebuildTheSameReadRules) {
  TempDir a, b;
  constexpr size_t kSize = 128 * 1024;
  std::mt19937_64 rng(7);
  std::string model(kSize, 'o');
  WriteWholeFile(a / "vhd", model);
  WriteWholeFile(b / "tmp", "");
  auto ea = KeepingRecords(a.path()), eb = KeepingRecords(b.path());
  EmbeddedHost first("fuse-1");
  ASSERT_TRUE(first.AddEndpoint("A", ea).ok());
  ASSERT_TRUE(first.AddEndpoint("B", eb).ok());
  auto& sw = first.sswitch();
  const char* kAway = "<*, w, //A/vhd> -> track_writes(); <IO, //B/tmp>";
  const char* kHome = "<*, w, //A/vhd> -> track_writes(); <IO, //A/vhd>";
  auto rule = sw.Insert(R(kAway));
  ASSERT_TRUE(rule.ok());
  bool away = true;
  for (int step = 0; step < 600; ++step) {
    if (step % 150 == 149) {
      away = !away;
      ASSERT_TRUE(sw.Update({R(away ? kAway : kHome)}, {*rule}).ok());
      rule = sw.ListRules().back().id;
    }
    const uint64_t off = rng() % kSize;
    const uint64_t len = 1 + rng() % std::min<uint64_t>(8192, kSize - off);
    std::string data(len, static_cast<char>('a' + step % 26));
    ASSERT_TRUE(first.Write("t", "//A/vhd", off, Bytes(data)).ok());
    model.replace(off, len, data);
  }
  const std::set<std::string> want = DelegateRules(sw);
  ASSERT_FALSE(want.empty());
  std::vector<DelegateRuleRecord> records = ea->kept;
  records.insert(records.end(), eb->kept.begin(), eb->kept.end());
  // Writes home that retire no tracked range need no record.
  EXPECT_GT(records.size(), 300u);
  EXPECT_LT(records.size(), 600u);

  EmbeddedHost second("fuse-1");
  ASSERT_TRUE(second.AddLocalEndpoint("A", a.path()).ok());
  ASSERT_TRUE(second.AddLocalEndpoint("B", b.path()).ok());
  ASSERT_TRUE(second.sswitch().Insert(R(away ? kAway : kHome)).ok());
  // Records arrive from several servers in any order.
  std::shuffle(records.begin(), records.end(), rng);
  size_t skipped = 99;
  ASSERT_TRUE(second.sswitch().RestoreDelegateRules(records, &skipped).ok());
  EXPECT_EQ(skipped, 0u);
  EXPECT_EQ(DelegateRules(second.sswitch()), want);
  EXPECT_EQ(ReadAll(second, "//A/vhd", kSize), model);
  // Records of a rule that is gone are skipped.
  EmbeddedHost third("fuse-1");
  ASSERT_TRUE(third.AddLocalEndpoint("A", a.path()).ok());
  ASSERT_TRUE(third.AddLocalEndpoint("B", b.path()).ok());
  ASSERT_TRUE(third.sswitch().RestoreDelegateRules(records, &skipped).ok());
  EXPECT_EQ(skipped, records.size());
  EXPECT_TRUE(third.sswitch().ListRules().empty());
}

// A rename of a file whose writes track_writes keeps away: its places move
// along and its read rules follow the new name (with records that say so,
// from which a new sSwitch rebuilds them); a file it replaces loses its
// rules; a hard link of such a file is refused (EXDEV: a second name would
// not follow later writes), and nothing changes.
TEST(TrackWritesRenameTest, ReadRulesFollowTheNewName) {
  TempDir a, b;
  std::filesystem::create_directories(a / "d");
  std::filesystem::create_directories(b / "t");
  auto eb = KeepingRecords(b.path());
  EmbeddedHost host("fuse-1");
  ASSERT_TRUE(host.AddLocalEndpoint("A", a.path()).ok());
  ASSERT_TRUE(host.AddEndpoint("B", eb).ok());
  auto& sw = host.sswitch();
  const char* kAway = "<*, w, //A/d/*> -> track_writes(); <IO, //B/t/*>";
  ASSERT_TRUE(sw.Insert(R(kAway)).ok());
  auto write = [&](const std::string& f, uint64_t off, const std::string& d) {
    ASSERT_TRUE(host.Write("t", f, off, Bytes(d)).ok());
  };
  auto rename = [&](const std::string& from, const std::string& to) {
    IoArgs args;
    args.second_file = to;
    return host.Call("t", Op::kRenameFrom, from, args).status();
  };
  WriteWholeFile(a / "d/x", std::string(8192, 'o'));
  WriteWholeFile(a / "d/z", std::string(8192, 'o'));
  write("//A/d/x", 100, "xxxx");
  write("//A/d/x", 5000, "XXXX");
  write("//A/d/z", 0, std::string(8192, 'z'));
  std::string x(8192, 'o');
  x.replace(100, 4, "xxxx");
  x.replace(5000, 4, "XXXX");
  ASSERT_EQ(ReadAll(host, "//A/d/x", 8192), x);

  IoArgs link;
  link.second_file = "//A/d/x";
  auto linked = host.Call("t", Op::kLink, "//A/d/w", link);
  EXPECT_EQ(ErrnoOf(linked.status()), EXDEV) << linked.status();
  EXPECT_FALSE(std::filesystem::exists(a / "d/w"));

  ASSERT_TRUE(rename("//A/d/x", "//A/d/y").ok());
  EXPECT_EQ(ReadAll(host, "//A/d/y", 8192), x);
  EXPECT_TRUE(std::filesystem::exists(b / "t/y"));
  EXPECT_FALSE(std::filesystem::exists(b / "t/x"));
  EXPECT_EQ(
      DelegateRules(sw),
      (std::set<std::string>{"<*, r, //A/d/y[100:104]> -> <IO, //B/t/y>",
                             "<*, r, //A/d/y[5000:5004]> -> <IO, //B/t/y>",
                             "<*, r, //A/d/z[0:8K]> -> <IO, //B/t/z>"}));
  // Over a tracked file: z's rules go, y's become z's.
  ASSERT_TRUE(rename("//A/d/y", "//A/d/z").ok());
  EXPECT_EQ(ReadAll(host, "//A/d/z", 8192), x);
  const std::set<std::string> want = {
      "<*, r, //A/d/z[100:104]> -> <IO, //B/t/z>",
      "<*, r, //A/d/z[5000:5004]> -> <IO, //B/t/z>"};
  EXPECT_EQ(DelegateRules(sw), want);
  // Later writes to the new name are tracked under it.
  write("//A/d/z", 102, "zz");
  x.replace(102, 2, "zz");
  EXPECT_EQ(ReadAll(host, "//A/d/z", 8192), x);

  // A new sSwitch given the records (in any order) routes as this one.
  std::vector<DelegateRuleRecord> records = eb->kept;
  std::mt19937_64 rng(3);
  std::shuffle(records.begin(), records.end(), rng);
  EmbeddedHost second("fuse-1");
  ASSERT_TRUE(second.AddLocalEndpoint("A", a.path()).ok());
  ASSERT_TRUE(second.AddLocalEndpoint("B", b.path()).ok());
  ASSERT_TRUE(second.sswitch().Insert(R(kAway)).ok());
  size_t skipped = 99;
  ASSERT_TRUE(second.sswitch().RestoreDelegateRules(records, &skipped).ok());
  EXPECT_EQ(DelegateRules(second.sswitch()), DelegateRules(sw));
  EXPECT_EQ(ReadAll(second, "//A/d/z", 8192), x);

  // An unlink takes the name's rules (and records) along: a new file of
  // that name reads its own bytes, here and after a restart.
  ASSERT_TRUE(host.Call("t", Op::kUnlink, "//A/d/z").ok());
  EXPECT_TRUE(DelegateRules(sw).empty());
  EXPECT_FALSE(std::filesystem::exists(b / "t/z"));
  WriteWholeFile(a / "d/z", std::string(8192, 'n'));
  EXPECT_EQ(ReadAll(host, "//A/d/z", 8192), std::string(8192, 'n'));
  EmbeddedHost third("fuse-1");
  ASSERT_TRUE(third.AddLocalEndpoint("A", a.path()).ok());
  ASSERT_TRUE(third.AddLocalEndpoint("B", b.path()).ok());
  ASSERT_TRUE(third.sswitch().Insert(R(kAway)).ok());
  records = eb->kept;
  std::shuffle(records.begin(), records.end(), rng);
  ASSERT_TRUE(third.sswitch().RestoreDelegateRules(records, &skipped).ok());
  EXPECT_TRUE(DelegateRules(third.sswitch()).empty());
  EXPECT_EQ(ReadAll(third, "//A/d/z", 8192), std::string(8192, 'n'));
}

// Writes brought home (the file itself as target) retire the ranges they
// cover: once every tracked byte is written home, no read rule is left and
// reads take the file's own route.
TEST_F(SSwitchTest, TrackWritesHomeRetiresTheRangesItCovers) {
  constexpr size_t kSize = 64 * 1024;
  WriteWholeFile(a_ / "vhd", std::string(kSize, 'o'));
  WriteWholeFile(b_ / "tmp", "");
  auto& sw = host_.sswitch();
  auto away = sw.Insert(R("<*, w, //A/vhd> -> track_writes(); <IO, //B/tmp>"));
  ASSERT_TRUE(away.ok());
  std::string model(kSize, 'o');
  for (uint64_t off : {0u, 8192u, 20000u, 40000u}) {
    const std::string data(3000, 'a');
    ASSERT_TRUE(host_.Write("t", "//A/vhd", off, Bytes(data)).ok());
    model.replace(off, data.size(), data);
  }
  EXPECT_EQ(DelegateRules(sw).size(), 4u);
  ASSERT_TRUE(sw.Update({R("<*, w, //A/vhd> -> track_writes(); <IO, //A/vhd>")},
                        {*away})
                  .ok());
  // Part of one range: the rest keeps its rule.
  ASSERT_TRUE(
      host_.Write("t", "//A/vhd", 1000, Bytes(std::string(500, 'h'))).ok());
  model.replace(1000, 500, std::string(500, 'h'));
  EXPECT_EQ(
      DelegateRules(sw),
      (std::set<std::string>{"<*, r, //A/vhd[0:1000]> -> <IO, //B/tmp>",
                             "<*, r, //A/vhd[1500:3000]> -> <IO, //B/tmp>",
                             "<*, r, //A/vhd[8K:11192]> -> <IO, //B/tmp>",
                             "<*, r, //A/vhd[20000:23000]> -> <IO, //B/tmp>",
                             "<*, r, //A/vhd[40000:43000]> -> <IO, //B/tmp>"}));
  EXPECT_EQ(ReadAll(host_, "//A/vhd", kSize), model);
  // The file rewritten home (as a reclaim does): no read rule left.
  ASSERT_TRUE(host_.Write("t", "//A/vhd", 0, Bytes(model)).ok());
  EXPECT_TRUE(DelegateRules(sw).empty());
  EXPECT_EQ(ReadWholeFile(a_ / "vhd"), model);
  EXPECT_EQ(ReadAll(host_, "//A/vhd", kSize), model);
}

// An off-load above a flow's rule, then track_writes(home) to the flow's
// own target: writes home retire ranges (no rule kept), and a new sSwitch
// given the records rebuilds exactly the ranges still away.
TEST(TrackWritesRestoreTest, WritesHomeToTheFlowsTargetRetireRanges) {
  TempDir a, b;
  constexpr size_t kSize = 64 * 1024;
  WriteWholeFile(a / "home", std::string(kSize, 'o'));
  auto ea = KeepingRecords(a.path()), eb = KeepingRecords(b.path());
  EmbeddedHost first("fuse-1");
  ASSERT_TRUE(first.AddEndpoint("A", ea).ok());
  ASSERT_TRUE(first.AddEndpoint("B", eb).ok());
  ASSERT_TRUE(first.AddLocalEndpoint("V", a.path()).ok());
  auto& sw = first.sswitch();
  const char* kFlow = "<*, *, //V/vhd> -> <IO, //A/home>";
  const char* kAway = "@1 <*, w, //V/vhd> -> track_writes(); <IO, //B/tmp>";
  const char* kHome =
      "@1 <*, w, //V/vhd> -> track_writes(home); <IO, //A/home>";
  ASSERT_TRUE(sw.Insert(R(kFlow)).ok());
  auto away = sw.Insert(R(kAway));
  ASSERT_TRUE(away.ok());
  std::string model(kSize, 'o');
  auto write = [&](EmbeddedHost& h, uint64_t off, uint64_t len, char c) {
    const std::string data(len, c);
    ASSERT_TRUE(h.Write("t", "//V/vhd", off, Bytes(data)).ok());
    model.replace(off, len, data);
  };
  write(first, 0, 10000, 'a');
  write(first, 30000, 10000, 'b');
  EXPECT_EQ(DelegateRules(sw).size(), 2u);
  ASSERT_TRUE(sw.Update({R(kHome)}, {*away}).ok());
  write(first, 5000, 30000, 'h');  // retires [5000, 35000)
  EXPECT_EQ(
      DelegateRules(sw),
      (std::set<std::string>{"<*, r, //V/vhd[0:5000]> -> <IO, //B/tmp>",
                             "<*, r, //V/vhd[35000:40000]> -> <IO, //B/tmp>"}));
  EXPECT_EQ(ReadAll(first, "//V/vhd", kSize), model);
  write(first, 50000, 100, 'n');  // nothing away there: no record
  std::vector<DelegateRuleRecord> records = ea->kept;
  EXPECT_EQ(records.size(), 1u);
  records.insert(records.end(), eb->kept.begin(), eb->kept.end());

  EmbeddedHost second("fuse-1");
  ASSERT_TRUE(second.AddLocalEndpoint("A", a.path()).ok());
  ASSERT_TRUE(second.AddLocalEndpoint("B", b.path()).ok());
  ASSERT_TRUE(second.AddLocalEndpoint("V", a.path()).ok());
  ASSERT_TRUE(second.sswitch().Insert(R(kFlow)).ok());
  ASSERT_TRUE(second.sswitch().Insert(R(kHome)).ok());
  ASSERT_TRUE(second.sswitch().RestoreDelegateRules(records).ok());
  EXPECT_EQ(DelegateRules(second.sswitch()), DelegateRules(sw));
  EXPECT_EQ(ReadAll(second, "//V/vhd", kSize), model);
}

TEST_F(SSwitchTest, WritesToADetourMakeItsFileAndParents) {
  WriteWholeFile(a_ / "x", "home");
  ASSERT_TRUE(host_.LoadRules("<*, w, //A/x> -> <IO, //B/deep/er/x>").ok());
  // Nothing exists at B yet: the first write makes deep/er/x there.
  auto n = host_.Write("t", "//A/x", 2, Bytes("ta"));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2u);
  EXPECT_EQ(ReadWholeFile(b_ / "deep/er/x"), std::string("\0\0ta", 4));
  ASSERT_TRUE(host_.Write("t", "//A/x", 0, Bytes("da")).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "deep/er/x"), "data");
  EXPECT_EQ(ReadWholeFile(a_ / "x"), "home");
  // A truncate routed there makes the file as well.
  ASSERT_TRUE(host_.LoadRules("<*, w, //A/y> -> <IO, //B/other/y>").ok());
  IoArgs args;
  args.size = 10;
  ASSERT_TRUE(host_.Call("t", Op::kTruncate, "//A/y", args).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "other/y"), std::string(10, '\0'));
}

TEST_F(SSwitchTest, ValidateChecksWithoutInstalling) {
  auto& sw = host_.sswitch();
  EXPECT_TRUE(sw.Validate({R("<*, w, //A/x> -> <IO, //B/x>")}).ok());
  absl::Status s = sw.Validate(
      {R("<*, w, //A/x> -> <IO, //B/x>"), R("<*, w, //A/y> -> <IO, //C/y>")});
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("//C/y"));
  EXPECT_TRUE(sw.ListRules().empty());
  EXPECT_EQ(sw.version(), 2u);  // the two endpoints only
  auto id = sw.Insert(R("<*, w, //A/x> -> <IO, //B/x>"));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 1u);  // validation used no ids
}

TEST_F(SSwitchTest, TrackWritesMergesSequentialWrites) {
  WriteWholeFile(a_ / "log", "");
  WriteWholeFile(b_ / "log", "");
  auto& sw = host_.sswitch();
  ASSERT_TRUE(
      sw.Insert(R("<*, w, //A/log> -> track_writes(); <IO, //B/log>")).ok());
  std::string all;
  for (int i = 0; i < 100; ++i) {
    std::string chunk(1000, static_cast<char>('a' + i % 26));
    ASSERT_TRUE(host_.Write("t", "//A/log", all.size(), Bytes(chunk)).ok());
    all += chunk;
  }
  auto rules = sw.ListRules();
  ASSERT_EQ(rules.size(), 2u);  // the write rule and one merged read range
  EXPECT_EQ(FormatRule(rules[0].rule),
            "<*, r, //A/log[0:100000]> -> <IO, //B/log>");
  EXPECT_EQ(ReadAll(host_, "//A/log", 200000), all);
}

TEST_F(SSwitchTest, DetouredWritesGrowTheHomeSize) {
  WriteWholeFile(a_ / "f", "home");
  WriteWholeFile(b_ / "f", "");
  WriteWholeFile(a_ / "g", std::string(100, 'a'));
  WriteWholeFile(b_ / "g", "");
  auto& sw = host_.sswitch();
  ASSERT_TRUE(sw.Insert(R("<*, w, //A/f> -> <IO, //B/f>")).ok());
  ASSERT_TRUE(sw.Insert(R("<*, r|w, //A/g[4096:8192]> -> <IO, //B/g>")).ok());
  ASSERT_TRUE(host_.Write("t", "//A/f", 10000, Bytes("tail")).ok());
  EXPECT_EQ(std::filesystem::file_size(a_ / "f"), 10004u);
  EXPECT_EQ(ReadWholeFile(a_ / "f").substr(0, 4), "home");  // never cut
  EXPECT_EQ(std::filesystem::file_size(b_ / "f"), 10004u);
  // Growing never shrinks: a write below the size leaves it alone.
  ASSERT_TRUE(host_.Write("t", "//A/f", 0, Bytes("xx")).ok());
  EXPECT_EQ(std::filesystem::file_size(a_ / "f"), 10004u);

  // A split write: the home piece and the detoured piece; the size is the
  // whole write's end, and reads give back exactly what was written.
  const std::string data(8192, 'w');
  ASSERT_TRUE(host_.Write("t", "//A/g", 0, Bytes(data)).ok());
  EXPECT_EQ(std::filesystem::file_size(a_ / "g"), 8192u);
  EXPECT_EQ(ReadAll(host_, "//A/g", 20000), data);

  // A file moved whole (its metadata too) has its home at the target: the
  // write reaches it, and the file left behind does not grow.
  WriteWholeFile(a_ / "h", "old");
  WriteWholeFile(b_ / "h", "");
  ASSERT_TRUE(sw.Insert(R("<*, *, //A/h> -> <IO, //B/h>")).ok());
  ASSERT_TRUE(host_.Write("t", "//A/h", 5000, Bytes("new")).ok());
  EXPECT_EQ(std::filesystem::file_size(a_ / "h"), 3u);
  EXPECT_EQ(std::filesystem::file_size(b_ / "h"), 5003u);
}

TEST_F(SSwitchTest, RouteObserverSeesEveryTableChange) {
  WriteWholeFile(a_ / "log", "");
  WriteWholeFile(b_ / "log", "");
  auto& sw = host_.sswitch();
  std::vector<std::string> seen;  // the observer runs under the control lock
  sw.SetRouteObserver([&](const std::vector<HeaderPattern>& changed) {
    std::string batch;
    for (const HeaderPattern& p : changed) {
      StrAppend(&batch, batch.empty() ? "" : " ", FormatPattern(p));
    }
    seen.push_back(batch);
  });
  auto id = sw.Insert(R("<*, w, //A/log> -> track_writes(); <IO, //B/log>"));
  ASSERT_TRUE(id.ok());
  // The delegate's own rule reaches the observer too.
  ASSERT_TRUE(host_.Write("t", "//A/log", 0, Bytes("hello")).ok());
  ASSERT_TRUE(sw.Update({R("<*, r, //A/y> -> <IO, //B/y>")}, {*id}).ok());
  EXPECT_FALSE(sw.Update({}, {12345}).ok());  // no change, no call
  sw.SetRouteObserver(nullptr);
  ASSERT_TRUE(sw.Insert(R("<*, r, //A/z> -> <IO, //B/z>")).ok());
  EXPECT_THAT(seen,
              ::testing::ElementsAre("<*, w, //A/log>", "<*, r, //A/log[0:5]>",
                                     "<*, r, //A/y> <*, w, //A/log>"));
}

TEST_F(SSwitchTest, ConcurrentTrackWritesOnDisjointRegions) {
  constexpr int kThreads = 4;
  constexpr size_t kRegion = 64 * 1024;
  WriteWholeFile(a_ / "f", std::string(kThreads * kRegion, 'z'));
  WriteWholeFile(b_ / "f", "");
  ASSERT_TRUE(host_.sswitch()
                  .Insert(R("<*, w, //A/f> -> track_writes(); <IO, //B/f>"))
                  .ok());
  std::vector<std::thread> threads;
  std::vector<std::string> models(kThreads, std::string(kRegion, 'z'));
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < 300; ++i) {
        const uint64_t off = rng() % kRegion;
        const uint64_t len =
            1 + rng() % std::min<uint64_t>(4096, kRegion - off);
        std::string data(len, static_cast<char>('a' + rng() % 26));
        ASSERT_TRUE(
            host_.Write("t", "//A/f", t * kRegion + off, Bytes(data)).ok());
        models[t].replace(off, len, data);
        const uint64_t roff = rng() % kRegion;
        const uint64_t rlen =
            1 + rng() % std::min<uint64_t>(8192, kRegion - roff);
        ASSERT_EQ(ReadAll(host_, "//A/f", rlen, t * kRegion + roff),
                  models[t].substr(roff, rlen));
      }
    });
  }
  for (auto& t : threads) t.join();
}

// --- Files whose bytes live in several places (whole_file.cc) ---

absl::StatusOr<uint64_t> Seek(EmbeddedHost& host, const std::string& file,
                              uint64_t off, int whence) {
  Io io;
  io.header.source = "t";
  io.header.op = Op::kLseek;
  io.header.file = file;
  io.header.offset = off;
  io.args.whence = whence;
  absl::Status s = host.Submit(io);
  if (!s.ok()) return s;
  return io.bytes;
}

TEST_F(SSwitchTest, TruncateCutsEveryPlaceOfARangedFile) {
  WriteWholeFile(a_ / "f", "");
  ASSERT_TRUE(host_.LoadRules("<*, r|w, //A/f[0:64K]> -> <IO, //B/f>").ok());
  ASSERT_TRUE(host_.Write("t", "//A/f", 0, Bytes("AAAAAAAAAA")).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "f"), "AAAAAAAAAA");
  EXPECT_EQ(std::filesystem::file_size(a_ / "f"), 10u) << "the home grew";
  IoArgs args;
  args.to_set = kSetSize;
  args.size = 0;
  ASSERT_TRUE(host_.Call("t", Op::kSetattr, "//A/f", args).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "f"), "") << "the place was cut";
  args.size = 10;
  auto st = host_.Call("t", Op::kSetattr, "//A/f", args);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->st_size, 10);
  // Extending never brings old bytes back: what no place holds is a hole.
  EXPECT_EQ(ReadAll(host_, "//A/f", 100), std::string(10, '\0'));
  EXPECT_EQ(ReadWholeFile(b_ / "f"), "") << "places are never extended";
}

TEST_F(SSwitchTest, ShortRangedReadIsZeroFilledToTheHomesSize) {
  WriteWholeFile(a_ / "f", "");
  ASSERT_TRUE(host_.LoadRules("<*, r|w, //A/f[0:64K]> -> <IO, //B/f>").ok());
  ASSERT_TRUE(host_.Write("t", "//A/f", 0, Bytes("head")).ok());
  ASSERT_TRUE(host_.Write("t", "//A/f", 70000, Bytes("tail")).ok());
  // [0, 4096) lies in B/f, which holds 4 bytes: the rest reads as zeros.
  std::string want(4096, '\0');
  want.replace(0, 4, "head");
  EXPECT_EQ(ReadAll(host_, "//A/f", 4096), want);
  EXPECT_EQ(ReadAll(host_, "//A/f", 10, 69996), std::string("\0\0\0\0tail", 8));
  // A place that does not exist yet reads as a hole.
  WriteWholeFile(a_ / "g", std::string(100, 'x'));
  ASSERT_TRUE(host_.LoadRules("<*, r|w, //A/g[0:64K]> -> <IO, //B/g>").ok());
  EXPECT_EQ(ReadAll(host_, "//A/g", 100), std::string(100, '\0'));
}

TEST_F(SSwitchTest, UnlinkRemovesThePlacesOfAFile) {
  WriteWholeFile(a_ / "f", "");
  ASSERT_TRUE(host_.LoadRules("<*, r|w, //A/f[0:64K]> -> <IO, //B/f>").ok());
  ASSERT_TRUE(host_.Write("t", "//A/f", 0, Bytes("old bytes")).ok());
  ASSERT_TRUE(host_.Call("t", Op::kUnlink, "//A/f").ok());
  EXPECT_FALSE(std::filesystem::exists(b_ / "f"));
  // A new file of that name starts empty.
  IoArgs args;
  args.mode = 0644;
  args.open_flags = O_RDWR;
  ASSERT_TRUE(host_.Call("t", Op::kCreate, "//A/f", args).ok());
  ASSERT_TRUE(host_.Write("t", "//A/f", 0, Bytes("n")).ok());
  EXPECT_EQ(ReadAll(host_, "//A/f", 100), "n");
}

// A rule that sends every op of a folder's files elsewhere: the folder is
// missing at the target until the first create, which makes it with the
// mode and owner of the folder by the file's own name (its home is the
// target too, so it cannot be the model).
TEST_F(SSwitchTest, ParentsMadeAtATargetTakeTheNamesFolderAsModel) {
  std::filesystem::create_directories(a_ / "shared");
  ASSERT_EQ(chmod((a_ / "shared").c_str(), 01777), 0);
  ASSERT_EQ(chown((a_ / "shared").c_str(), 1234, 1234), 0);
  ASSERT_TRUE(
      host_.LoadRules("<*, *, //A/shared/*> -> <IO, //B/shared/*>").ok());
  IoArgs args;
  args.mode = S_IFREG | 0644;
  args.open_flags = O_CREAT | O_RDWR;
  const mode_t umask_was = umask(0);  // as the daemons run
  auto made = host_.Call("t", Op::kCreate, "//A/shared/f", args);
  umask(umask_was);
  ASSERT_TRUE(made.ok()) << made.status();
  struct stat st {};
  ASSERT_EQ(stat((b_ / "shared").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 1234u);
}

// Completes every IO, and counts the fsyncs it was sent per path (with
// datasync or not).
class FsyncCountingEndpoint : public Endpoint {
 public:
  void Submit(Io* io, std::string_view path) override {
    if (io->header.op == Op::kFsync) {
      std::lock_guard<std::mutex> l(mu_);
      ++fsyncs_[std::string(path)];
      if (io->args.datasync) ++datasyncs_;
    }
    if (io->header.op == Op::kWrite) io->bytes = io->header.length;
    io->Complete();
  }
  int Fsyncs(const std::string& path) {
    std::lock_guard<std::mutex> l(mu_);
    return fsyncs_[path];
  }
  int Datasyncs() {
    std::lock_guard<std::mutex> l(mu_);
    return datasyncs_;
  }

 private:
  std::mutex mu_;
  std::map<std::string, int> fsyncs_;
  int datasyncs_ = 0;
};

// Bytes a ranged rule put elsewhere are made durable by the file's fsync:
// it succeeds only once every place synced too.
TEST_F(SSwitchTest, FsyncReachesEveryPlaceOfARangedFile) {
  auto places = std::make_shared<FsyncCountingEndpoint>();
  ASSERT_TRUE(host_.AddEndpoint("P", places).ok());
  WriteWholeFile(a_ / "f", "");
  ASSERT_TRUE(host_.LoadRules("<*, r|w, //A/f[0:64K]> -> <IO, //P/f>").ok());
  ASSERT_TRUE(host_.Write("t", "//A/f", 0, Bytes("in the place")).ok());
  IoArgs args;
  args.datasync = true;
  ASSERT_TRUE(host_.Call("t", Op::kFsync, "//A/f", args).ok());
  EXPECT_EQ(places->Fsyncs("f"), 1) << "the place was not synced";
  EXPECT_EQ(places->Datasyncs(), 1) << "fdatasync became fsync";

  // A place whose sync fails fails the file's.
  auto failing = std::make_shared<FailingEndpoint>(
      absl::Status(absl::StatusCode::kInternal, "disk gone"));
  ASSERT_TRUE(host_.AddEndpoint("Bad", failing).ok());
  WriteWholeFile(a_ / "g", "");
  ASSERT_TRUE(
      host_.LoadRules("<*, r|w, //A/g[64K:128K]> -> <IO, //Bad/g>").ok());
  auto synced = host_.Call("t", Op::kFsync, "//A/g");
  EXPECT_FALSE(synced.ok());
  EXPECT_GE(failing->calls.load(), 1);
}

TEST_F(SSwitchTest, RenameMovesPlacesOrRefusesWithExdev) {
  std::filesystem::create_directories(a_ / "d");
  WriteWholeFile(a_ / "d/f", "");
  ASSERT_TRUE(host_
                  .LoadRules("<*, r|w, //A/d/*[0:64K]> -> <IO, //B/p/*>\n"
                             "<*, r|w, //A/x[0:4K]> -> <IO, //B/x>")
                  .ok());
  ASSERT_TRUE(host_.Write("t", "//A/d/f", 0, Bytes("ranged")).ok());
  IoArgs args;
  args.second_file = "//A/d/g";
  ASSERT_TRUE(host_.Call("t", Op::kRenameFrom, "//A/d/f", args).ok());
  EXPECT_FALSE(std::filesystem::exists(b_ / "p/f"));
  EXPECT_EQ(ReadWholeFile(b_ / "p/g"), "ranged") << "the place moved along";
  EXPECT_EQ(ReadAll(host_, "//A/d/g", 100), "ranged");
  // Out of the rule's reach: the bytes in B/p/g would be lost.
  args.second_file = "//A/y";
  auto st = host_.Call("t", Op::kRenameFrom, "//A/d/g", args);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(ErrnoOf(st.status()), EXDEV);
  EXPECT_THAT(std::string(st.status().message()),
              HasSubstr("nothing was changed"));
  EXPECT_TRUE(std::filesystem::exists(a_ / "d/g"));
  // A link takes the place along too.
  args.second_file = "//A/d/g";
  ASSERT_TRUE(host_.Call("t", Op::kLink, "//A/d/h", args).ok());
  EXPECT_EQ(ReadWholeFile(b_ / "p/h"), "ranged");
  // Into another rule's place: refused.
  args.second_file = "//A/d/h";
  st = host_.Call("t", Op::kLink, "//A/x", args);
  EXPECT_EQ(ErrnoOf(st.status()), EXDEV);
}

TEST_F(SSwitchTest, SeekDataAndHoleAcrossPlaces) {
  WriteWholeFile(a_ / "f", "");
  ASSERT_TRUE(host_.LoadRules("<*, r|w, //A/f[64K:128K]> -> <IO, //B/f>").ok());
  // Data only in the detoured range, at 100000; the file is 200000 long.
  ASSERT_TRUE(host_.Write("t", "//A/f", 100000, Bytes("data")).ok());
  IoArgs args;
  args.to_set = kSetSize;
  args.size = 200000;
  ASSERT_TRUE(host_.Call("t", Op::kSetattr, "//A/f", args).ok());
  auto data = Seek(host_, "//A/f", 0, SEEK_DATA);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_LE(*data, 100000u);
  EXPECT_GE(*data, 65536u) << "the home holds no data before the range";
  auto hole = Seek(host_, "//A/f", 100000, SEEK_HOLE);
  ASSERT_TRUE(hole.ok()) << hole.status();
  EXPECT_GT(*hole, 100003u);
  EXPECT_LE(*hole, 200000u);
  auto none = Seek(host_, "//A/f", 200000, SEEK_DATA);
  EXPECT_EQ(ErrnoOf(none.status()), ENXIO);
}

TEST_F(SSwitchTest, FallocateShiftsAreRefusedOnFilesInSeveralPlaces) {
  WriteWholeFile(a_ / "f", std::string(65536, 'x'));
  ASSERT_TRUE(host_.LoadRules("<*, r|w, //A/f[0:4K]> -> <IO, //B/f>").ok());
  Io io;
  io.header.source = "t";
  io.header.op = Op::kFallocate;
  io.header.file = "//A/f";
  io.header.offset = 8192;
  io.header.length = 4096;
  io.args.fallocate_mode = FALLOC_FL_COLLAPSE_RANGE;
  EXPECT_EQ(ErrnoOf(host_.Submit(io)), EOPNOTSUPP);
  EXPECT_EQ(ReadWholeFile(a_ / "f"), std::string(65536, 'x'));
}

TEST_F(SSwitchTest, SizeChangesRoutedAwayReachTheHome) {
  WriteWholeFile(a_ / "f", "");
  ASSERT_TRUE(host_.LoadRules("<*, w, //A/f> -> <IO, //B/t>").ok());
  IoArgs args;
  args.to_set = kSetSize;
  args.size = 4096;
  ASSERT_TRUE(host_.Call("t", Op::kSetattr, "//A/f", args).ok());
  EXPECT_EQ(std::filesystem::file_size(b_ / "t"), 4096u);
  EXPECT_EQ(std::filesystem::file_size(a_ / "f"), 4096u) << "stat sees it";
}

TEST_F(SSwitchTest, DetourFilesGetTheModeAndOwnerOfTheHome) {
  WriteWholeFile(a_ / "d/f", "");
  ASSERT_EQ(chmod((a_ / "d/f").c_str(), 0640), 0);
  ASSERT_EQ(chown((a_ / "d/f").c_str(), 1234, 5678), 0);
  ASSERT_EQ(chmod((a_ / "d").c_str(), 0750), 0);
  ASSERT_EQ(chown((a_ / "d").c_str(), 1234, 5678), 0);
  ASSERT_TRUE(
      host_.LoadRules("<*, w, //A/d/f> -> <IO, //A/d/f>, <IO, //B/r/d/f>")
          .ok());
  ASSERT_TRUE(host_.Write("t", "//A/d/f", 0, Bytes("x")).ok());
  struct stat st {};
  ASSERT_EQ(stat((b_ / "r/d/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_uid, 1234u);
  EXPECT_EQ(st.st_gid, 5678u);
  ASSERT_EQ(stat((b_ / "r/d").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u) << "parents as the file's directory";
  EXPECT_EQ(st.st_uid, 1234u);
}

TEST_F(SSwitchTest, ScatterFailingOnSomeTargetsFencesTheFile) {
  auto bad = std::make_shared<FailingEndpoint>(ErrnoStatus(ENOSPC, "full"));
  ASSERT_TRUE(host_.AddEndpoint("Bad", bad).ok());
  WriteWholeFile(a_ / "f", "");
  ASSERT_TRUE(
      host_.LoadRules("<*, w, //A/f> -> <IO, //A/f>, <IO, //Bad/f>").ok());
  ASSERT_FALSE(host_.Write("t", "//A/f", 0, Bytes("data")).ok());
  auto& sw = host_.sswitch();
  ASSERT_EQ(sw.Fences().size(), 1u);
  EXPECT_EQ(sw.Fences()[0].first, "//A/f");
  EXPECT_THAT(sw.Fences()[0].second, HasSubstr("//Bad/f"));
  // Its bytes are out of reach; its name is not.
  std::string buf(10, '\0');
  auto n = host_.Read("t", "//A/f", 0, std::span<char>(buf));
  EXPECT_EQ(ErrnoOf(n.status()), EIO);
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("fenced"));
  EXPECT_TRUE(host_.Call("t", Op::kGetattr, "//A/f").ok());
  // Cleared by hand, or by removing the file.
  ASSERT_TRUE(sw.ClearFence("//A/f").ok());
  EXPECT_EQ(ReadAll(host_, "//A/f", 10), "data");
  EXPECT_TRUE(absl::IsNotFound(sw.ClearFence("//A/f")));
  ASSERT_FALSE(host_.Write("t", "//A/f", 0, Bytes("more")).ok());
  ASSERT_EQ(sw.Fences().size(), 1u);
  // (Without the rule: the broken target would fail the removal of its
  // copy too.)
  ASSERT_TRUE(sw.Delete(P("<*, w, //A/f>")).ok());
  ASSERT_TRUE(host_.Call("t", Op::kUnlink, "//A/f").ok());
  EXPECT_TRUE(sw.Fences().empty());
}

}  // namespace
}  // namespace sroute

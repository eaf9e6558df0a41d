// SPDX-License-Identifier: Apache-2.0
// Stages changed and removed live (SSwitch::ChangeStage, RemoveStage), and
// the change observers caches rely on for coherence.
#include <fcntl.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "embed/embedded_host.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rules/parser.h"
#include "sswitch/sswitch.h"
#include "tests/util/holding_endpoint.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::HoldingEndpoint;
using ::testing::HasSubstr;

// Passes IOs on and counts them on both paths.
class PassStage : public Stage {
 public:
  void Submit(Io* io, const Forward& forward) override {
    ++requests;
    io->AddResponseHook([this](Io&) { ++responses; });
    forward(io);
  }
  std::atomic<int> requests{0}, responses{0};
};

class StageChangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(host_.AddEndpoint("H", held_).ok());
    ASSERT_TRUE(host_.AddStage("S", stage_).ok());
    ASSERT_TRUE(host_
                    .LoadRules("<*, *, //H/s/*> -> <IO, stage:S>\n"
                               "<stage:S, *, //H/s/*> -> <IO, //H/s/*>")
                    .ok());
  }

  // Routes a write of //H/s/NAME; `done` counts its completion.
  std::unique_ptr<Io> Write(const std::string& name, std::atomic<int>* done) {
    auto io = std::make_unique<Io>();
    io->header = {"t", "", Op::kWrite, "//H/s/" + name, 0, 1};
    io->write_data = std::span<const char>("x", 1);
    io->set_completion([done](Io& d) {
      EXPECT_TRUE(d.status.ok()) << d.status;
      ++*done;
    });
    host_.sswitch().Route(io.get());
    return io;
  }

  SSwitch::StageInfo Info() {
    auto stages = host_.sswitch().Stages();
    EXPECT_EQ(stages.size(), 1u);
    return stages.empty() ? SSwitch::StageInfo{} : stages[0];
  }

  EmbeddedHost host_{"h"};
  std::shared_ptr<HoldingEndpoint> held_ =
      std::make_shared<HoldingEndpoint>(/*hold=*/true);
  std::shared_ptr<PassStage> stage_ = std::make_shared<PassStage>();
};

TEST_F(StageChangeTest, AChangeParksNewIosWaitsForThoseInsideThenLetsThemOn) {
  std::atomic<int> done{0};
  auto inside = Write("a", &done);
  held_->WaitHeld();
  EXPECT_EQ(Info().in_flight, 1);

  std::atomic<bool> changed{false};
  int requests_at_change = -1;
  int64_t inside_at_change = -1;
  std::thread changer([&] {
    absl::Status s = host_.sswitch().ChangeStage(
        "S",
        [&](Stage&) {
          requests_at_change = stage_->requests.load();
          inside_at_change = Info().in_flight;
          changed = true;
          return absl::OkStatus();
        },
        absl::Seconds(30));
    EXPECT_TRUE(s.ok()) << s;
  });
  // The gate is shut once the change waits: an IO arriving now parks (one
  // that got in before is held downstream like the first).
  std::vector<std::unique_ptr<Io>> later;
  while (Info().parked == 0) later.push_back(Write("b", &done));
  EXPECT_FALSE(changed.load()) << "the change ran with an IO inside";
  const int requests_before = stage_->requests.load();
  held_->set_hold(false);
  held_->Release();  // the IOs inside complete; the change runs
  changer.join();
  EXPECT_TRUE(changed.load());
  EXPECT_EQ(inside_at_change, 0);
  EXPECT_EQ(requests_at_change, requests_before)
      << "a parked IO reached the stage during the change";
  // The parked IO went on through the stage after the change.
  EXPECT_EQ(Info().parked, 0u);
  EXPECT_EQ(stage_->requests.load(), requests_before + 1);
  EXPECT_EQ(stage_->responses.load(), stage_->requests.load());
  EXPECT_EQ(Info().in_flight, 0);
  EXPECT_EQ(done.load(), 1 + static_cast<int>(later.size()));
}

TEST_F(StageChangeTest, AChangeThatCannotDrainChangesNothingAndReleasesIos) {
  std::atomic<int> done{0};
  auto inside = Write("a", &done);
  held_->WaitHeld();
  bool ran = false;
  absl::Status s = host_.sswitch().ChangeStage(
      "S",
      [&](Stage&) {
        ran = true;
        return absl::OkStatus();
      },
      absl::Milliseconds(50));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(s.message(), HasSubstr("nothing changed"));
  EXPECT_FALSE(ran);
  // The gate is open again: a new IO reaches the stage.
  held_->set_hold(false);
  auto next = Write("b", &done);
  EXPECT_EQ(done.load(), 1);
  held_->Release();
  EXPECT_EQ(done.load(), 2);
  EXPECT_EQ(
      host_.sswitch()
          .ChangeStage(
              "nope", [](Stage&) { return absl::OkStatus(); }, absl::Seconds(1))
          .code(),
      absl::StatusCode::kNotFound);
}

TEST_F(StageChangeTest, AStageRulesNameIsNotRemovedAndOneNoneNameIs) {
  auto removed = host_.sswitch().RemoveStage("S", absl::Seconds(5));
  ASSERT_FALSE(removed.ok());
  EXPECT_EQ(removed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(removed.status().message(),
              HasSubstr("stage 'S' is in use by rule 1"));
  // Delete the rule that sends IOs to it.
  ASSERT_TRUE(host_.sswitch().Delete(1).ok());
  removed = host_.sswitch().RemoveStage("S", absl::Seconds(5));
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(removed->get(), stage_.get());
  EXPECT_TRUE(host_.sswitch().Stages().empty());
  // Rules may not name it any more.
  absl::Status s = host_.LoadRules("<*, r, //H/s/*> -> <IO, stage:S>");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("unknown stage 'S'"));
  // And it can be added again.
  EXPECT_TRUE(host_.AddStage("S", std::make_shared<PassStage>()).ok());
}

TEST_F(StageChangeTest, AfterARemovalIosTakeTheRulesOfNow) {
  held_->set_hold(false);
  std::atomic<int> done{0};
  ASSERT_TRUE(host_.sswitch().Delete(1).ok());
  auto removed = host_.sswitch().RemoveStage("S", absl::Seconds(5));
  ASSERT_TRUE(removed.ok()) << removed.status();
  // With no rule naming it, writes take the default route.
  auto io = Write("c", &done);
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(stage_->requests.load(), 0);
}

// Holds each IO on its way in until Release().
class GateStage : public Stage {
 public:
  void Submit(Io* io, const Forward& forward) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      held_.emplace_back(io, &forward);
    }
    cv_.notify_all();
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !held_.empty(); });
  }
  void Release() {
    std::vector<std::pair<Io*, const Forward*>> out;
    {
      std::lock_guard<std::mutex> l(mu_);
      out.swap(held_);
    }
    for (auto [io, forward] : out) (*forward)(io);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<Io*, const Forward*>> held_;
};

// An IO routed by a snapshot that still has the stage, reaching it after
// its removal (it waited in another stage meanwhile): the rules of now
// route it, and it never enters the removed stage.
TEST_F(StageChangeTest,
       AnIoOfAnOlderSnapshotReachingARemovedStageTakesTheRulesOfNow) {
  held_->set_hold(false);
  auto gate = std::make_shared<GateStage>();
  ASSERT_TRUE(host_.AddStage("G", gate).ok());
  // //H/g/* goes through G, then S, then to the file.
  ASSERT_TRUE(host_
                  .LoadRules("<*, *, //H/g/*> -> <IO, stage:G>\n"
                             "<stage:G, *, //H/g/*> -> <IO, stage:S>\n"
                             "<stage:S, *, //H/g/*> -> <IO, //H/g/*>")
                  .ok());
  std::atomic<int> done{0};
  auto io = std::make_unique<Io>();
  io->header = {"t", "", Op::kWrite, "//H/g/x", 0, 1};
  io->write_data = std::span<const char>("x", 1);
  io->set_completion([&](Io& d) {
    EXPECT_TRUE(d.status.ok()) << d.status;
    ++done;
  });
  host_.sswitch().Route(io.get());
  gate->WaitHeld();  // in G, with the snapshot of now
  // Every rule naming S goes, then S.
  for (const RuleInfo& r : host_.sswitch().ListRules()) {
    if (FormatRule(r.rule).find("stage:S") != std::string::npos) {
      ASSERT_TRUE(host_.sswitch().Delete(r.id).ok());
    }
  }
  auto removed = host_.sswitch().RemoveStage("S", absl::Seconds(5));
  ASSERT_TRUE(removed.ok()) << removed.status();
  gate->Release();  // G hands it back; its snapshot says stage:S
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(stage_->requests.load(), 0);
}

// An IO sent straight to a stage (a server's stage:// request) parks at a
// quiesce of its flow like any IO, and enters the stage once released: an
// update's drain is not held up by stage traffic that never parks.
TEST_F(StageChangeTest, AnIoSentToAStageParksAtAQuiesce) {
  held_->set_hold(false);
  auto& sw = host_.sswitch();
  auto pattern = ParsePattern("<*, *, //H/s/q>");
  ASSERT_TRUE(pattern.ok());
  ASSERT_TRUE(sw.Quiesce(*pattern, true).ok());
  std::atomic<int> done{0};
  Io io;
  io.header = {"t", "", Op::kWrite, "//H/s/q", 0, 1};
  io.write_data = std::span<const char>("x", 1);
  io.set_completion([&](Io& d) {
    EXPECT_TRUE(d.status.ok()) << d.status;
    ++done;
  });
  sw.RouteToStage(&io, "S");
  EXPECT_EQ(sw.parked(), 1u);
  EXPECT_EQ(stage_->requests.load(), 0);
  EXPECT_TRUE(sw.Drain(*pattern, absl::Milliseconds(100)).ok());
  ASSERT_TRUE(sw.Quiesce(*pattern, false).ok());
  EXPECT_EQ(done.load(), 1);
  EXPECT_EQ(stage_->requests.load(), 1);
  // A stage that is not there fails the IO, as before.
  Io missing;
  missing.header = {"t", "", Op::kRead, "//H/s/q", 0, 1};
  absl::Status status;
  missing.set_completion([&](Io& d) { status = d.status; });
  sw.RouteToStage(&missing, "nope");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
}

TEST(ChangeObserverTest,
     SeesByteChangingIosBeforeAnEndpointAndBeforeTheCaller) {
  EmbeddedHost host("h");
  auto held = std::make_shared<HoldingEndpoint>(/*hold=*/true);
  ASSERT_TRUE(host.AddEndpoint("H", held).ok());
  struct Seen {
    Op op;
    std::string file;
    bool done;
  };
  std::mutex mu;
  std::vector<Seen> seen;
  const uint64_t id =
      host.sswitch().AddChangeObserver([&](const Io& io, bool done) {
        std::lock_guard<std::mutex> l(mu);
        seen.push_back({io.header.op, io.header.file, done});
      });
  struct Routed {
    Io io;
    bool completed = false;
    bool observed_done_first = false;
  };
  auto route = [&](Op op, const std::string& file, IoArgs args = {}) {
    auto r = std::make_unique<Routed>();
    r->io.header = {"t", "", op, file, 0, 1};
    r->io.args = std::move(args);
    r->io.set_completion([&, rp = r.get(), file](Io&) {
      rp->completed = true;
      std::lock_guard<std::mutex> l(mu);
      rp->observed_done_first =
          !seen.empty() && seen.back().done && seen.back().file == file;
    });
    host.sswitch().Route(&r->io);
    return r;
  };
  {
    auto w = route(Op::kWrite, "//H/w");
    held->WaitHeld();
    {
      std::lock_guard<std::mutex> l(mu);
      ASSERT_EQ(seen.size(), 1u) << "seen before the endpoint has it";
      EXPECT_FALSE(seen[0].done);
    }
    held->set_hold(false);
    held->Release();
    EXPECT_TRUE(w->completed);
    EXPECT_TRUE(w->observed_done_first)
        << "the caller learned of it before the observer";
  }
  route(Op::kRead, "//H/r");
  route(Op::kGetattr, "//H/r");
  IoArgs trunc_open;
  trunc_open.open_flags = O_WRONLY | O_TRUNC;
  route(Op::kOpen, "//H/o", trunc_open);
  IoArgs plain_open;
  plain_open.open_flags = O_RDONLY;
  route(Op::kOpen, "//H/p", plain_open);
  route(Op::kTruncate, "//H/t");
  route(Op::kUnlink, "//H/u");
  IoArgs size;
  size.to_set = kSetSize;
  route(Op::kSetattr, "//H/s", size);
  IoArgs mode;
  mode.to_set = kSetMode;
  route(Op::kSetattr, "//H/m", mode);
  host.sswitch().RemoveChangeObserver(id);
  route(Op::kWrite, "//H/after");
  std::vector<std::string> files;
  for (const Seen& s : seen) {
    if (!s.done) files.push_back(s.file);
  }
  EXPECT_EQ(files, (std::vector<std::string>{"//H/w", "//H/o", "//H/t", "//H/u",
                                             "//H/s"}));
  EXPECT_EQ(seen.size(), 2 * files.size());
}

}  // namespace
}  // namespace sroute

namespace sroute {
namespace {

// A file whose every route passes a stage that hands it back to the file
// itself is one file: renaming it (with another tenant's rule for the same
// files in the table) moves it, and loses nothing.
TEST(StageRouteTest, RenameThroughAWaypointMovesTheFile) {
  ::sroute::testing::TempDir dir;
  EmbeddedHost host("h");
  ASSERT_TRUE(host.AddLocalEndpoint("home", dir.path()).ok());
  ASSERT_TRUE(host.AddStage("c", std::make_shared<PassStage>()).ok());
  ASSERT_TRUE(host.LoadRules("<bob, w, //home/*> -> <IO, //home/*>\n"
                             "<stage:c, *, //home/*> -> <IO, //home/*>\n"
                             "<*, *, //home/*> -> <IO, stage:c>")
                  .ok());
  ::sroute::testing::WriteWholeFile(dir.path() + "/g", "G");
  IoArgs args;
  args.second_file = "//home/f";
  auto r = host.Call("alice", Op::kRenameFrom, "//home/g", args);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/g"));
  EXPECT_EQ(::sroute::testing::ReadWholeFile(dir.path() + "/f"), "G");
}

}  // namespace
}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// The GC grants of one poll (stages/replica_set/gc_grants.h), which the
// replica_set stage and sroute-sim share: regular requests always, soft
// ones only while no other member collects, background passes only in
// background mode, and each grant seen by the members after it.
#include "stages/replica_set/gc_grants.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sroute {
namespace {

constexpr uint64_t kPollAt = 1'000'000;

// Runs one poll at kPollAt; a grant makes the member collect for 5 ms.
// Returns what happened, a word per event: "0:soft", "1:delayed", ...
std::string PollGrants(bool background, std::vector<GcMember> members) {
  std::string log;
  auto note = [&](size_t i, const std::string& what) {
    if (!log.empty()) log += " ";
    log += std::to_string(i) + ":" + what;
  };
  auto grant = [&](size_t i, GcGrant kind) -> std::optional<uint64_t> {
    note(i, GcGrantName(kind));
    return kPollAt + 5'000'000;
  };
  auto delayed = [&](size_t i) { note(i, "delayed"); };
  auto no_need = [&](size_t) {};
  DecideGc(background, kPollAt, members, {grant, delayed, no_need});
  return log;
}

GcMember Needs(GcNeed need) {
  GcMember m;
  m.need = need;
  return m;
}

GcMember Collecting() {
  GcMember m;
  m.collecting = true;
  m.until_ns = kPollAt + 1'000'000;
  return m;
}

TEST(GcGrantsTest, RegularAlwaysSoftOnlyWhileNoOtherCollects) {
  EXPECT_EQ(PollGrants(false, {Needs(GcNeed::kSoft), Needs(GcNeed::kNone)}),
            "0:soft");
  EXPECT_EQ(PollGrants(false, {Collecting(), Needs(GcNeed::kSoft)}),
            "1:delayed");
  EXPECT_EQ(PollGrants(false, {Collecting(), Needs(GcNeed::kRegular)}),
            "1:regular");
  // A member that collects already is not granted again.
  GcMember busy = Collecting();
  busy.need = GcNeed::kRegular;
  EXPECT_EQ(PollGrants(false, {busy, Needs(GcNeed::kNone)}), "");
  // A collection that has ended does not block.
  GcMember ended;
  ended.until_ns = kPollAt - 1;
  EXPECT_EQ(PollGrants(false, {ended, Needs(GcNeed::kSoft)}), "1:soft");
}

TEST(GcGrantsTest, AGrantIsSeenByTheMembersAfterIt) {
  // Two soft requests at once: the first is granted, the second waits.
  EXPECT_EQ(PollGrants(false, {Needs(GcNeed::kSoft), Needs(GcNeed::kSoft)}),
            "0:soft 1:delayed");
  // A regular grant (made first) delays a soft request before it.
  EXPECT_EQ(PollGrants(false, {Needs(GcNeed::kSoft), Needs(GcNeed::kRegular)}),
            "1:regular 0:delayed");
}

TEST(GcGrantsTest, BackgroundPassesOnlyInBackgroundModeAndWhenUnblocked) {
  GcMember idle;
  idle.bg_ok = true;
  EXPECT_EQ(PollGrants(false, {idle, Needs(GcNeed::kNone)}), "");
  EXPECT_EQ(PollGrants(true, {idle, Needs(GcNeed::kNone)}), "0:bg");
  EXPECT_EQ(PollGrants(true, {Collecting(), idle}), "");
  // A soft request goes before a background pass of the same member.
  GcMember both = idle;
  both.need = GcNeed::kSoft;
  EXPECT_EQ(PollGrants(true, {both}), "0:soft");
}

TEST(GcGrantsTest, AFailedGrantLeavesTheMemberAsItWas) {
  std::vector<GcMember> members = {Needs(GcNeed::kSoft), Needs(GcNeed::kSoft)};
  int delayed = 0;
  auto refuse = [](size_t, GcGrant) -> std::optional<uint64_t> {
    return std::nullopt;
  };
  auto count = [&](size_t) { ++delayed; };
  auto no_need = [](size_t) {};
  DecideGc(false, kPollAt, members, {refuse, count, no_need});
  // The first grant failed: the second member is not blocked by it (its
  // grant fails too), and nobody waits.
  EXPECT_EQ(delayed, 0);
  EXPECT_EQ(members[0].until_ns, 0u);
}

}  // namespace
}  // namespace sroute

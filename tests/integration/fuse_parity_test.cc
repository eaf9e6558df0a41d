// SPDX-License-Identifier: Apache-2.0
// POSIX parity: every scenario of posix_scenarios.h gives the same
// transcript on a mounted sroute volume as on a plain directory.
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/integration/posix_scenarios.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/temp_dir.h"
#include "tests/util/uring_switch.h"

namespace sroute {
namespace {

using ::sroute::testing::kUringSwitchPath;
using ::sroute::testing::MountedVolume;
using ::sroute::testing::PosixScenarios;
using ::sroute::testing::Scenario;
using ::sroute::testing::TempDir;
using ::sroute::testing::UringSwitchOn;

// A volume mounted for a whole suite, with `extra` arguments (every
// scenario runs in its own directory of it).
struct SuiteMount {
  explicit SuiteMount(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--backing", backing.path()};
    args.insert(args.end(), extra.begin(), extra.end());
    volume = std::make_unique<MountedVolume>(SROUTE_FUSE_BINARY, mnt.path(),
                                             std::move(args));
  }
  TempDir backing;
  TempDir mnt;
  std::unique_ptr<MountedVolume> volume;  // unmounted first
};

// Requests through /dev/fuse (the io_uring queues are the default where the
// kernel offers them; FuseParityUringTest covers those).
class FuseParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() { mount_ = new SuiteMount({"--io-uring=off"}); }
  static void TearDownTestSuite() { delete mount_; }
  static SuiteMount* mount_;
};
SuiteMount* FuseParityTest::mount_ = nullptr;

const Scenario& Find(const std::string& name) {
  static const std::vector<Scenario> all = PosixScenarios();
  for (const Scenario& s : all) {
    if (s.name == name) return s;
  }
  std::abort();
}

// Runs scenario `name` in a fresh directory of `mnt` and in a plain one.
void ExpectSameTranscript(const std::string& name, const TempDir& mnt) {
  const Scenario& scenario = Find(name);
  TempDir plain;
  const std::string on_mount = mnt / scenario.name;
  ASSERT_EQ(mkdir(on_mount.c_str(), 0755), 0);
  const std::string expected = scenario.run(plain.path());
  const std::string got = scenario.run(on_mount);
  EXPECT_EQ(got, expected);
}

TEST_P(FuseParityTest, SameTranscriptAsAPlainDirectory) {
  ASSERT_TRUE(mount_->volume->ok()) << "sroute-fuse did not mount";
  ExpectSameTranscript(GetParam(), mount_->mnt);
}

std::vector<std::string> ScenarioNames() {
  std::vector<std::string> names;
  for (const Scenario& s : PosixScenarios()) names.push_back(s.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Posix, FuseParityTest,
                         ::testing::ValuesIn(ScenarioNames()),
                         [](const auto& info) { return info.param; });

// The same with requests served on io_uring queues (--io-uring=on).
class FuseParityUringTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    uring_ = UringSwitchOn();
    if (uring_) mount_ = new SuiteMount({"--io-uring=on"});
  }
  static void TearDownTestSuite() { delete mount_; }
  static bool uring_;
  static SuiteMount* mount_;
};
bool FuseParityUringTest::uring_ = false;
SuiteMount* FuseParityUringTest::mount_ = nullptr;

TEST_P(FuseParityUringTest, SameTranscriptAsAPlainDirectory) {
  if (!uring_) {
    GTEST_SKIP() << "this kernel has no FUSE over io_uring ("
                 << kUringSwitchPath << ")";
  }
  ASSERT_TRUE(mount_->volume->ok()) << "sroute-fuse did not mount";
  ExpectSameTranscript(GetParam(), mount_->mnt);
}

INSTANTIATE_TEST_SUITE_P(Posix, FuseParityUringTest,
                         ::testing::ValuesIn(ScenarioNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sroute

// POSIX parity: every scenario of posix_scenarios.h gives the same
// transcript on a mounted sroute volume as on a plain directory.
#include <sys/stat.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/integration/posix_scenarios.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/temp_dir.h"
#include "tests/util/uring_switch.h"

namespace sroute {
namespace {

using ::sroute::testing::MountedVolume;
using ::sroute::testing::PosixScenarios;
using ::sroute::testing::Scenario;
using ::sroute::testing::TempDir;
using ::sroute::testing::UringSwitch;

// One mount shared by every scenario (each runs in its own directory).
class FuseParityTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    backing_ = new TempDir();
    mnt_ = new TempDir();
    volume_ = new MountedVolume(SROUTE_FUSE_BINARY, mnt_->path(),
                                {"--backing", backing_->path()});
  }
  static void TearDownTestSuite() {
    delete volume_;
    delete mnt_;
    delete backing_;
  }
  static TempDir* backing_;
  static TempDir* mnt_;
  static MountedVolume* volume_;
};
TempDir* FuseParityTest::backing_ = nullptr;
TempDir* FuseParityTest::mnt_ = nullptr;
MountedVolume* FuseParityTest::volume_ = nullptr;

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
  ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  ExpectSameTranscript(GetParam(), *mnt_);
}

std::vector<std::string> ScenarioNames() {
  std::vector<std::string> names;
  for (const Scenario& s : PosixScenarios()) names.push_back(s.name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Posix, FuseParityTest,
                         ::testing::ValuesIn(ScenarioNames()),
                         [](const auto& info) { return info.param; });

// The same with requests served on io_uring queues (--io-uring).
class FuseParityUringTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    switch_ = new UringSwitch(true);
    backing_ = new TempDir();
    mnt_ = new TempDir();
    if (switch_->ok()) {
      volume_ =
          new MountedVolume(SROUTE_FUSE_BINARY, mnt_->path(),
                            {"--backing", backing_->path(), "--io-uring"});
    }
  }
  static void TearDownTestSuite() {
    delete volume_;
    delete mnt_;
    delete backing_;
    delete switch_;
  }
  static UringSwitch* switch_;
  static TempDir* backing_;
  static TempDir* mnt_;
  static MountedVolume* volume_;
};
UringSwitch* FuseParityUringTest::switch_ = nullptr;
TempDir* FuseParityUringTest::backing_ = nullptr;
TempDir* FuseParityUringTest::mnt_ = nullptr;
MountedVolume* FuseParityUringTest::volume_ = nullptr;

TEST_P(FuseParityUringTest, SameTranscriptAsAPlainDirectory) {
  if (!switch_->ok()) {
    GTEST_SKIP() << "this kernel has no FUSE over io_uring ("
                 << UringSwitch::kPath << ")";
  }
  ASSERT_TRUE(volume_->ok()) << "sroute-fuse did not mount";
  ExpectSameTranscript(GetParam(), *mnt_);
}

INSTANTIATE_TEST_SUITE_P(Posix, FuseParityUringTest,
                         ::testing::ValuesIn(ScenarioNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sroute

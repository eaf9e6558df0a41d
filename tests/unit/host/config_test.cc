// SPDX-License-Identifier: Apache-2.0
// A host's configuration (file, flags, checks) and the runtime built from it,
// without FUSE or a network: what sroute-fuse and sroute-server share.
#include "host/config.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <vector>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "host/flags.h"
#include "host/runtime.h"
#include "tests/util/temp_dir.h"

namespace sroute {
namespace {

using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::TempDir;
using ::sroute::testing::WriteWholeFile;

// Parses `args` (without the program name) as a host of `kind` would.
absl::StatusOr<proto::HostConfig> ParseFlags(HostKind kind,
                                             std::vector<std::string> args) {
  CLI::App app{"test"};
  HostFlags flags(&app, kind);
  proto::HostConfig* o = &flags.overlay();
  app.add_option_function<std::string>(
      "--backing", [o](const std::string& v) { o->set_backing(v); });
  app.add_option_function<std::string>(
      "--root", [o](const std::string& v) { o->set_root(v); });
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  return flags.Resolve();
}

TEST(HostConfigTest, SyntaxErrorsNameLineAndColumn) {
  TempDir dir;
  WriteWholeFile(dir / "bad.conf", "name: \"a\"\nendpont { name: \"x\" }\n");
  auto c = LoadHostConfig(dir / "bad.conf");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("bad.conf:2:"), std::string::npos)
      << c.status();
  EXPECT_NE(c.status().message().find("endpont"), std::string::npos)
      << c.status();
}

TEST(HostConfigTest, RelativePathsAreTheConfigFilesDirectorys) {
  TempDir dir;
  WriteWholeFile(dir / "h.conf",
                 "rules_file: \"r.rules\"\nsecret_file: \"/abs/secret\"\n");
  auto c = LoadHostConfig(dir / "h.conf");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rules_file(), dir / "r.rules");
  EXPECT_EQ(c->secret_file(), "/abs/secret");
}

TEST(HostConfigTest, EachDaemonRefusesTheOthersFields) {
  proto::HostConfig server_only;
  server_only.set_listen("127.0.0.1:0");
  auto s = CheckHostConfig(server_only, HostKind::kFuse, "x.conf");
  EXPECT_EQ(s.message(), "x.conf: listen: only for sroute-server");
  EXPECT_TRUE(CheckHostConfig(server_only, HostKind::kServer, "x").ok());

  proto::HostConfig fuse_only;
  fuse_only.add_tenant()->set_name("a");
  fuse_only.mutable_tenant(0)->set_uid(7);
  s = CheckHostConfig(fuse_only, HostKind::kServer, "y.conf");
  EXPECT_EQ(s.message(), "y.conf: tenant: only for sroute-fuse");
  EXPECT_TRUE(CheckHostConfig(fuse_only, HostKind::kFuse, "y").ok());
}

TEST(HostConfigTest, BadValuesAreRefusedWithTheirField) {
  auto check = [](const std::string& text, HostKind kind) {
    proto::HostConfig c;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &c));
    return std::string(CheckHostConfig(c, kind, "c").message());
  };
  EXPECT_EQ(check("version: 2", HostKind::kFuse),
            "c: version 2 is newer than this sroute understands (1)");
  EXPECT_EQ(check("endpoint { name: \"x\" }", HostKind::kFuse),
            "c: every endpoint needs a name and a dir, a server or flash");
  EXPECT_EQ(check("endpoint { name: \"a/b\" dir: \"/d\" }", HostKind::kServer),
            "c: endpoint name 'a/b' has a '/'");
  EXPECT_EQ(check("kernel_cache: \"sometimes\"", HostKind::kFuse),
            "c: kernel_cache must be \"off\" or \"auto\", not \"sometimes\"");
  EXPECT_EQ(check("nice: 40", HostKind::kFuse),
            "c: nice: must be in -20..19, not 40");
  EXPECT_EQ(check("poll_us: 200000", HostKind::kServer),
            "c: poll_us: at most 100000");
  EXPECT_EQ(check("io_threads: 0", HostKind::kServer),
            "c: io_threads: must be in 1..64");
  EXPECT_EQ(check("tenant { name: \"t\" }", HostKind::kFuse),
            "c: every tenant needs a name and a uid, gid or cgroup");
  EXPECT_EQ(check("name: \"a/b\"", HostKind::kServer),
            "c: bad server name 'a/b'");
  EXPECT_EQ(check("io_threads: 4 poll_us: 50", HostKind::kServer),
            "c: io_threads: 4 with poll_us > 0: a polling network thread "
            "runs alone (poll_us: 0 for several threads)");
  EXPECT_EQ(check("metrics_rules: 100001", HostKind::kServer),
            "c: metrics_rules: must be in 0..100000");
  // The field says what an endpoint is, and the address must agree.
  EXPECT_EQ(
      check("endpoint { name: \"s\" server: \"/srv/x\" }", HostKind::kFuse),
      "c: endpoint s: server '/srv/x' is not HOST:PORT (a directory is "
      "dir:)");
  EXPECT_EQ(check("endpoint { name: \"d\" dir: \"h:7400\" }", HostKind::kFuse),
            "c: endpoint d: dir 'h:7400' reads as HOST:PORT (a server is "
            "server:; a directory of that name: ./h:7400)");
}

TEST(HostFlagsTest, FlagsAddToTheFileAndOverrideIt) {
  TempDir dir;
  WriteWholeFile(dir / "h.conf",
                 "backing: \"/from/file\"\n"
                 "name: \"file-name\"\n"
                 "endpoint { name: \"a\" dir: \"/a\" }\n"
                 "rule: \"<*, r, //home/x> -> <IO, //a/x>\"\n"
                 "poll_us: 5\n");
  auto c = ParseFlags(
      HostKind::kFuse,
      {"--config", dir / "h.conf", "--backing", "/from/flag", "--endpoint",
       "b=10.0.0.2:7400", "--rule", "<*, w, //home/y> -> <IO, //a/y>"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->backing(), "/from/flag");  // overridden
  EXPECT_EQ(c->name(), "file-name");      // kept
  EXPECT_EQ(c->poll_us(), 5u);
  ASSERT_EQ(c->endpoint_size(), 2);  // the file's, then the flag's
  EXPECT_EQ(c->endpoint(0).dir(), "/a");
  EXPECT_EQ(c->endpoint(1).name(), "b");
  EXPECT_EQ(c->endpoint(1).server(), "10.0.0.2:7400");
  ASSERT_EQ(c->rule_size(), 2);
  EXPECT_EQ(c->rule(1), "<*, w, //home/y> -> <IO, //a/y>");
}

TEST(HostFlagsTest, BadFlagsAreClearErrors) {
  auto c = ParseFlags(HostKind::kFuse, {"--endpoint", "nameless"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(
      c.status().message().find(
          "--endpoint wants NAME=DIR, NAME=HOST:PORT or NAME=flash:DIR[,...], "
          "got 'nameless'"),
      std::string::npos)
      << c.status();
  c = ParseFlags(HostKind::kServer, {"--backing", "/x"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "command line: backing: only for sroute-fuse");
  c = ParseFlags(HostKind::kServer, {"--config", "/nonexistent/h.conf"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "cannot read config file /nonexistent/h.conf");
}

TEST(HostRuntimeTest, BuildsEndpointsAndRulesFromTheConfig) {
  TempDir home, fast;
  TempDir rules;
  WriteWholeFile(rules / "v.rules", "<*, w, //home/log> -> <IO, //fast/log>\n");
  proto::HostConfig c;
  c.set_name("h1");
  c.set_backing(home.path());
  auto* e = c.add_endpoint();
  e->set_name("fast");
  e->set_dir(fast.path());
  c.set_rules_file(rules / "v.rules");
  c.add_rule("<*, w, //home/tmp> -> <IO, //fast/tmp>");
  // The files exist at home (the namespace) and where the rules send IO.
  for (const std::string& f :
       {home / "log", home / "tmp", fast / "log", fast / "tmp"}) {
    WriteWholeFile(f, "");
  }
  auto rt = HostRuntime::Build(c, HostKind::kFuse);
  ASSERT_TRUE(rt.ok()) << rt.status();
  EXPECT_EQ((*rt)->sswitch().name(), "h1");
  EXPECT_EQ((*rt)->home_name(), "home");
  EXPECT_EQ((*rt)->io_threads(), nullptr);  // nothing remote
  EXPECT_TRUE(std::filesystem::is_directory(home / ".sroute/unlinked"));
  // Both rules route: the file's and the config's.
  auto w = (*rt)->host().Write("t", "//home/log", 0, std::string_view("L"));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(
      (*rt)->host().Write("t", "//home/tmp", 0, std::string_view("T")).ok());
  EXPECT_EQ(ReadWholeFile(fast / "log"), "L");
  EXPECT_EQ(ReadWholeFile(fast / "tmp"), "T");
  EXPECT_EQ(ReadWholeFile(home / "log"), std::string(1, '\0'));  // its size
}

TEST(HostRuntimeTest, ServerHomeIsItsNamedRoot) {
  TempDir root;
  proto::HostConfig c;
  c.set_name("S1");
  c.set_root(root.path());
  WriteWholeFile(root / "f", "");
  auto rt = HostRuntime::Build(c, HostKind::kServer, "a-secret-of-16-bytes+");
  ASSERT_TRUE(rt.ok()) << rt.status();
  EXPECT_EQ((*rt)->home_name(), "S1");
  EXPECT_NE((*rt)->io_threads(), nullptr);
  ASSERT_TRUE(
      (*rt)->host().Write("t", "//S1/f", 0, std::string_view("x")).ok());
  EXPECT_EQ(ReadWholeFile(root / "f"), "x");
}

TEST(HostRuntimeTest, ErrorsNameThePart) {
  TempDir home;
  proto::HostConfig c;
  c.set_backing("/nonexistent/sroute-home");
  auto rt = HostRuntime::Build(c, HostKind::kFuse);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().message(),
            "backing directory /nonexistent/sroute-home: not a directory");

  c.set_backing(home.path());
  c.add_rule("<*, w, //home/a> -> <IO, //nowhere/a>");
  rt = HostRuntime::Build(c, HostKind::kFuse);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("rule:1"), std::string::npos)
      << rt.status();
  EXPECT_NE(rt.status().message().find("nowhere"), std::string::npos)
      << rt.status();

  c.clear_rule();
  c.add_rule("<*, w, //home/a -> <IO, //home/b>");
  rt = HostRuntime::Build(c, HostKind::kFuse);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("rule:1:"), std::string::npos)
      << rt.status();

  c.clear_rule();
  c.add_endpoint()->set_name("far");
  c.mutable_endpoint(0)->set_server("127.0.0.1:1");
  rt = HostRuntime::Build(c, HostKind::kFuse);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("need the cluster secret"),
            std::string::npos)
      << rt.status();

  proto::HostConfig s;
  s.set_root(home.path());
  rt = HostRuntime::Build(s, HostKind::kServer);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().message(), "no cluster secret (--secret-file FILE)");
}

}  // namespace
}  // namespace sroute

namespace sroute {
namespace {

TEST(HostStagesTest, StagesFromTheFileAndFlagsAreBuiltBeforeTheRules) {
  TempDir dir, home;
  WriteWholeFile(dir / "h.conf",
                 "stage { name: \"slow\" kind: \"delay\" "
                 "delay { delay_us: 100 } }\n"
                 "rule: \"<*, w, //home/s> -> <IO, stage:slow>\"\n"
                 "rule: \"<*, w, //home/t> -> <IO, stage:tap>\"\n");
  auto c = ParseFlags(HostKind::kFuse, {"--config", dir / "h.conf", "--backing",
                                        home.path(), "--stage", "tap=delay"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->stage_size(), 2);
  EXPECT_EQ(c->stage(1).name(), "tap");
  auto rt = HostRuntime::Build(*c, HostKind::kFuse);
  ASSERT_TRUE(rt.ok()) << rt.status();
  auto stages = (*rt)->sswitch().Stages();
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_EQ(stages[0].name, "slow");
  EXPECT_EQ(stages[1].name, "tap");
  WriteWholeFile(home / "s", "");
  ASSERT_TRUE(
      (*rt)->host().Write("t", "//home/s", 0, std::string_view("S")).ok());
  EXPECT_EQ(ReadWholeFile(home / "s"), "S");
  EXPECT_EQ((*rt)->sswitch().Stages()[0].ios, 1u);
  EXPECT_TRUE((*rt)->StopStages().ok());
}

TEST(HostStagesTest, BadStagesAreRefusedWithTheirName) {
  TempDir home;
  auto c = ParseFlags(HostKind::kFuse, {"--backing", home.path(), "--stage",
                                        "c=cache:block_size=big"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("stage c: block_size: expected a number"),
            std::string::npos)
      << c.status();
  c = ParseFlags(HostKind::kFuse, {"--backing", home.path(), "--stage",
                                   "a=delay", "--stage", "a=delay"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "command line: stage a is declared twice");

  proto::HostConfig conf;
  conf.set_backing(home.path());
  auto* st = conf.add_stage();
  st->set_name("w");
  st->set_kind("warp");
  auto rt = HostRuntime::Build(conf, HostKind::kFuse);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("stage w: unknown kind 'warp'"),
            std::string::npos)
      << rt.status();

  // A rule naming a stage nobody declared: refused with the stage's name.
  conf.clear_stage();
  conf.add_rule("<*, r, //home/x> -> <IO, stage:ghost>");
  rt = HostRuntime::Build(conf, HostKind::kFuse);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("unknown stage 'ghost'"),
            std::string::npos)
      << rt.status();
}

}  // namespace
}  // namespace sroute

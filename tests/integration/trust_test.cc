// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: independent cases on one fixture (volumes used as
// other users), which each file of a split would repeat.
// The trust suite: what a user of the volume may rely on, tested as users
// are. POSIX parity as other users and with several users on one tree,
// locally and through a storage server; the model-based exerciser on plain
// and routed files under every rule kind (and while the route flips); SQLite
// in WAL and rollback mode, killed mid-transaction; copies with cp, rsync
// and tar; and the six symptoms of the trust issue, each as it was reported.
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "hostctl/control_client.h"
#include "proto/cli_json.pb.h"
#include "tests/integration/posix_scenarios.h"
#include "tests/util/ctl_json.h"
#include "tests/util/mounted_volume.h"
#include "tests/util/run_as.h"
#include "tests/util/run_command.h"
#include "tests/util/server_process.h"
#include "tests/util/temp_dir.h"
#include "tests/util/wait.h"
#include "tools/exercise/exerciser.h"

namespace sroute {
namespace {

using ::sroute::testing::Eventually;
using ::sroute::testing::Exercise;
using ::sroute::testing::ExerciseOptions;
using ::sroute::testing::ExerciseResult;
using ::sroute::testing::FromJson;
using ::sroute::testing::MountedVolume;
using ::sroute::testing::ReadAll;
using ::sroute::testing::ReadWholeFile;
using ::sroute::testing::RunAs;
using ::sroute::testing::RunCommand;
using ::sroute::testing::Scenario;
using ::sroute::testing::ServerProcess;
using ::sroute::testing::TempDir;
using ::sroute::testing::User;
using ::sroute::testing::WriteSecretFile;
using ::sroute::testing::WriteWholeFile;

namespace fs = std::filesystem;
using ::sroute::ControlClient;

// Operations per exerciser run: SROUTE_EXERCISE_OPS, or 10000 (a rule
// kind runs with both kernel-cache modes: 20000 in all).
uint64_t ExerciseOps() {
  const char* env = std::getenv("SROUTE_EXERCISE_OPS");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 10000;
}

// A sroute-fuse volume over a backing directory or a storage server, with
// a second endpoint "fast" (a directory or a server), rules and a control
// socket.
struct Volume {
  struct Options {
    std::string rules;  // rule text, one per line
    std::string kernel_cache = "auto";
    bool remote_backing = false;     // the home is a storage server
    bool remote_fast = false;        // "fast" is a storage server
    std::vector<std::string> extra;  // more sroute-fuse flags (--stage)
  };
  explicit Volume(const Options& o) {
    fs::create_directories(dir / "home");
    fs::create_directories(dir / "fast");
    fs::create_directories(dir / "mnt");
    chmod(dir.path().c_str(), 0755);
    const std::string secret = WriteSecretFile(dir / "secret");
    std::string backing = dir / "home";
    std::string fast = dir / "fast";
    if (o.remote_backing) {
      home_server = std::make_unique<ServerProcess>(
          SROUTE_SERVER_BINARY,
          std::vector<std::string>{"--root", dir / "home", "--name", "home",
                                   "--secret-file", secret, "--listen",
                                   "127.0.0.1:0"});
      backing = home_server->address();
    }
    if (o.remote_fast) {
      fast_server = std::make_unique<ServerProcess>(
          SROUTE_SERVER_BINARY,
          std::vector<std::string>{"--root", dir / "fast", "--name", "fast",
                                   "--secret-file", secret, "--listen",
                                   "127.0.0.1:0"});
      fast = fast_server->address();
    }
    WriteWholeFile(dir / "volume.rules", o.rules + "\n");
    socket = dir / "control.sock";
    std::vector<std::string> args = {
        "--backing",     backing, "--endpoint",     "fast=" + fast,
        "--secret-file", secret,  "--rules",        dir / "volume.rules",
        "--control",     socket,  "--kernel-cache", o.kernel_cache};
    args.insert(args.end(), o.extra.begin(), o.extra.end());
    volume = std::make_unique<MountedVolume>(SROUTE_FUSE_BINARY, dir / "mnt",
                                             std::move(args));
  }
  bool ok() const {
    return volume->ok() && (!home_server || home_server->ok()) &&
           (!fast_server || fast_server->ok());
  }
  std::string mnt(const std::string& rel = "") const {
    return rel.empty() ? dir / "mnt" : dir / ("mnt/" + rel);
  }
  std::string home(const std::string& rel) const {
    return dir / ("home/" + rel);
  }
  std::string fast(const std::string& rel) const {
    return dir / ("fast/" + rel);
  }
  // Runs sroutectl against this volume's control socket.
  std::pair<int, std::string> Ctl(const std::string& args) const {
    return RunCommand(std::string(SROUTECTL_BINARY) + " --host unix:" + socket +
                      " " + args);
  }

  TempDir dir;
  std::string socket;
  std::unique_ptr<ServerProcess> home_server;
  std::unique_ptr<ServerProcess> fast_server;
  std::unique_ptr<MountedVolume> volume;  // unmounted before servers stop
  ~Volume() { volume.reset(); }
};

const Scenario& FindScenario(const std::vector<Scenario>& all,
                             const std::string& name) {
  for (const Scenario& s : all) {
    if (s.name == name) return s;
  }
  std::abort();
}

std::vector<std::string> Names(const std::vector<Scenario>& all) {
  std::vector<std::string> names;
  for (const Scenario& s : all) names.push_back(s.name);
  return names;
}

// ---------------------------------------------------------------------------
// POSIX parity as other users, and with several users on one tree.

// The routes the parity scenarios run through, one volume each for all
// scenarios of a suite: the home a local directory; the home a storage
// server; every op through a write-back cache stage in front of a storage
// server (the tree lives there).
enum class Route { kLocal, kRemote, kWriteBackCache };
const Route kRoutes[] = {Route::kLocal, Route::kRemote, Route::kWriteBackCache};

std::string RouteName(Route r) {
  switch (r) {
    case Route::kLocal:
      return "local";
    case Route::kRemote:
      return "remote";
    case Route::kWriteBackCache:
      return "write_back_cache";
  }
  return "";
}

struct ParityVolumes {
  ParityVolumes() {
    Volume::Options local;
    volumes.push_back(std::make_unique<Volume>(local));
    Volume::Options remote;
    remote.remote_backing = true;
    volumes.push_back(std::make_unique<Volume>(remote));
    Volume::Options cache;
    cache.remote_fast = true;
    cache.rules =
        "<*, *, //home/*> -> <IO, stage:c>\n"
        "<stage:c, *, //home/*> -> <IO, //fast/*>";
    cache.extra = {"--stage",
                   "c=cache:partition_bytes=1M,write_mode=write_back,"
                   "dirty_limit_bytes=256K"};
    volumes.push_back(std::make_unique<Volume>(cache));
    for (auto& v : volumes) chmod(v->mnt().c_str(), 0755);
  }
  Volume& Of(Route r) { return *volumes[static_cast<size_t>(r)]; }
  std::vector<std::unique_ptr<Volume>> volumes;  // by Route
};
ParityVolumes* parity_volumes = nullptr;

ParityVolumes& Parity() {
  if (parity_volumes == nullptr) parity_volumes = new ParityVolumes;
  return *parity_volumes;
}

class ParityEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    delete parity_volumes;
    parity_volumes = nullptr;
  }
};
const auto* const parity_env =
    ::testing::AddGlobalTestEnvironment(new ParityEnvironment);

// A fresh directory `name` beneath `parent`, owned by `user`.
std::string UserDir(const std::string& parent, const std::string& name,
                    const User& user) {
  const std::string d = parent + "/" + name;
  if (mkdir(d.c_str(), 0755) != 0 ||
      chown(d.c_str(), user.uid, user.gid) != 0) {
    return "";
  }
  return d;
}

using UserParam =
    std::tuple<std::string, std::string, Route>;  // scenario, user, route

class UserParityTest : public ::testing::TestWithParam<UserParam> {};

TEST_P(UserParityTest, SameTranscriptAsAPlainDirectory) {
  const auto& [name, who, route] = GetParam();
  const User user = who == "nobody" ? testing::Nobody() : testing::Grouped();
  Volume& v = Parity().Of(route);
  ASSERT_TRUE(v.ok()) << "the volume did not come up";
  static const std::vector<Scenario> all = testing::PosixScenarios();
  const Scenario& scenario = FindScenario(all, name);
  TempDir plain;
  chmod(plain.path().c_str(), 0755);
  const std::string tag = name + "_" + who;
  const std::string on_plain = UserDir(plain.path(), tag, user);
  const std::string on_mount = UserDir(v.mnt(), tag, user);
  ASSERT_FALSE(on_plain.empty());
  ASSERT_FALSE(on_mount.empty());
  const std::string expected =
      RunAs(user, [&] { return scenario.run(on_plain); });
  const std::string got = RunAs(user, [&] { return scenario.run(on_mount); });
  EXPECT_EQ(got, expected);
  EXPECT_EQ(expected.find("<child failed"), std::string::npos) << expected;
}

INSTANTIATE_TEST_SUITE_P(
    AsUsers, UserParityTest,
    ::testing::Combine(::testing::ValuesIn(Names(testing::PosixScenarios())),
                       ::testing::Values("nobody", "grouped"),
                       ::testing::ValuesIn(kRoutes)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" +
             RouteName(std::get<2>(info.param));
    });

using IdentityParam = std::tuple<std::string, Route>;  // scenario, route

class IdentityParityTest : public ::testing::TestWithParam<IdentityParam> {};

TEST_P(IdentityParityTest, SameTranscriptAsAPlainDirectory) {
  const auto& [name, route] = GetParam();
  Volume& v = Parity().Of(route);
  ASSERT_TRUE(v.ok()) << "the volume did not come up";
  static const std::vector<Scenario> all = testing::IdentityScenarios();
  const Scenario& scenario = FindScenario(all, name);
  TempDir plain;
  chmod(plain.path().c_str(), 0755);
  const std::string on_plain = plain / name;
  const std::string on_mount = v.mnt(name);
  ASSERT_EQ(mkdir(on_plain.c_str(), 0755), 0);
  ASSERT_EQ(mkdir(on_mount.c_str(), 0755), 0);
  const std::string expected = scenario.run(on_plain);
  EXPECT_EQ(scenario.run(on_mount), expected);
  EXPECT_EQ(expected.find("UNEXPECTED"), std::string::npos) << expected;
}

INSTANTIATE_TEST_SUITE_P(
    Identity, IdentityParityTest,
    ::testing::Combine(::testing::ValuesIn(Names(testing::IdentityScenarios())),
                       ::testing::ValuesIn(kRoutes)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" + RouteName(std::get<1>(info.param));
    });

// ---------------------------------------------------------------------------
// The exerciser under every rule kind.

struct RuleKind {
  const char* name;
  const char* rules;
  bool remote_fast = false;
  // Files beneath fast/ that must equal d/a and d/b at the end (replicas).
  const char* replica_a = nullptr;
  const char* replica_b = nullptr;
  // A stage the rules route through (--stage NAME=KIND:...).
  const char* stage = nullptr;
};

const RuleKind kKinds[] = {
    {"plain", ""},
    {"whole_file",
     "<*, *, //home/d/a> -> <IO, //fast/a>\n"
     "<*, *, //home/d/b> -> <IO, //fast/b>"},
    {"prefix", "<*, *, //home/d/*> -> <IO, //fast/x/*>"},
    {"regex", "<*, *, re://home/d/(a|b)> -> <IO, //fast/*>"},
    {"byte_ranges",
     "<*, r|w, //home/d/a[0:64K]> -> <IO, //fast/a>\n"
     "<*, r|w, //home/d/a[128K:192K]> -> <IO, //fast/a.hi>\n"
     "<*, r|w, //home/d/b[32K:100K]> -> <IO, //fast/b>\n"
     "<*, r|w, //home/d/b[200K:300K]> -> <IO, //fast/b2>"},
    {"scatter", "<*, w, //home/d/*> -> <IO, //home/d/*>, <IO, //fast/s/*>",
     false, "s/a", "s/b"},
    {"track_writes",
     "<*, w, //home/d/a> -> track_writes(); <IO, //fast/ta>\n"
     "<*, w, //home/d/b> -> track_writes(); <IO, //fast/tb>"},
    {"remote_server",
     "<*, r|w, //home/d/a[0:64K]> -> <IO, //fast/a>\n"
     "<*, *, //home/d/b> -> <IO, //fast/b>",
     true},
    // Waypoints: a cache stage small enough to evict all the time.
    {"cache_write_through", "<*, *, //home/d/*> -> <IO, stage:c>", false,
     nullptr, nullptr, "c=cache:partition_bytes=192K"},
    {"cache_lru", "<*, *, //home/d/*> -> <IO, stage:c>", false, nullptr,
     nullptr, "c=cache:partition_bytes=192K,policy=lru,block_size=1K"},
    {"cache_write_back", "<*, *, //home/d/*> -> <IO, stage:c>", false, nullptr,
     nullptr,
     "c=cache:partition_bytes=192K,write_mode=write_back,"
     "dirty_limit_bytes=64K"},
    {"cache_to_server",
     "<*, *, //home/d/*> -> <IO, stage:c>\n"
     "<stage:c, *, //home/d/*> -> <IO, //fast/*>",
     true, nullptr, nullptr, "c=cache:partition_bytes=192K"},
    // A replica set of the home and a storage server: fast/d/a and d/b end
    // as the volume's files.
    {"replica_set", "<*, *, //home/d/*> -> <IO, stage:rs>", true, "d/a", "d/b",
     "rs=replica_set:member=home,member=fast,region_size=4K"},
};

using KindParam = std::tuple<int, std::string>;  // kind, kernel cache

class ExerciserTest : public ::testing::TestWithParam<KindParam> {};

TEST_P(ExerciserTest, MatchesTheModel) {
  const auto& [index, cache] = GetParam();
  const RuleKind& kind = kKinds[index];
  Volume::Options o;
  o.rules = kind.rules;
  o.kernel_cache = cache;
  o.remote_fast = kind.remote_fast;
  if (kind.stage != nullptr) o.extra = {"--stage", kind.stage};
  Volume v(o);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(mkdir(v.mnt("d").c_str(), 0755), 0);
  if (std::string(kind.name) == "replica_set") {
    ASSERT_EQ(mkdir(v.fast("d").c_str(), 0755), 0);
  }
  ExerciseOptions eo;
  eo.seed = 1000 + static_cast<uint64_t>(index) * 10 + (cache == "off");
  eo.ops = ExerciseOps();
  eo.shifts_may_be_refused = true;  // FUSE passes no collapse/insert
  const ExerciseResult r = Exercise({v.mnt("d/a"), v.mnt("d/b")}, eo);
  ASSERT_TRUE(r.ok) << r.error;
  if (kind.stage != nullptr) {
    // The IOs went through the stage, and it is idle.
    auto [rc, out] = v.Ctl("stages ls --json");
    ASSERT_EQ(rc, 0) << out;
    const proto::CtlStages stages = FromJson<proto::CtlStages>(out);
    ASSERT_EQ(stages.hosts_size(), 1) << out;
    ASSERT_GT(stages.hosts(0).stages_size(), 0) << out;
    for (const proto::StageStats& stage : stages.hosts(0).stages()) {
      EXPECT_GT(stage.ios(), 0u) << out;
      EXPECT_EQ(stage.in_flight(), 0) << out;
    }
  }
  if (kind.replica_a != nullptr) {
    // Scatter: both copies hold exactly the file.
    EXPECT_EQ(ReadAll(v.fast(kind.replica_a)), ReadAll(v.mnt("d/a")));
    EXPECT_EQ(ReadAll(v.fast(kind.replica_b)), ReadAll(v.mnt("d/b")));
    EXPECT_EQ(ReadAll(v.home("d/a")), ReadAll(v.mnt("d/a")));
  }
}

INSTANTIATE_TEST_SUITE_P(
    RuleKinds, ExerciserTest,
    ::testing::Combine(::testing::Range(0, static_cast<int>(std::size(kKinds))),
                       ::testing::Values("off", "auto")),
    [](const auto& info) {
      return std::string(kKinds[std::get<0>(info.param)].name) + "_cache_" +
             std::get<1>(info.param);
    });

// The exerciser while another thread moves the files between three layouts
// with the update protocol: quiesce, drain, copy the bytes to the new
// layout, change the rules, release.
class RouteFlipTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RouteFlipTest, ExerciserSeesNoCorruption) {
  Volume::Options o;
  o.kernel_cache = GetParam();
  Volume v(o);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(mkdir(v.mnt("d").c_str(), 0755), 0);
  fs::create_directories(v.fast("d"));
  // Layouts: 0 home, 1 whole file on fast, 2 [0:64K) on fast.
  auto rules = [](int layout, const std::string& f) -> std::string {
    if (layout == 1)
      return "<*, *, //home/d/" + f + "> -> <IO, //fast/d/" + f + ">";
    if (layout == 2) {
      return "<*, r|w, //home/d/" + f + "[0:64K]> -> <IO, //fast/d/" + f + ">";
    }
    return "";
  };
  // The file's bytes as `layout` lays them out on the backing directories.
  auto read = [&](int layout, const std::string& f) {
    std::string home = ReadAll(v.home("d/" + f));
    std::string fast = ReadAll(v.fast("d/" + f));
    if (layout == 0) return home;
    if (layout == 1) return fast;
    fast.resize(std::min<size_t>(65536, home.size()), '\0');
    return fast + (home.size() > 65536 ? home.substr(65536) : "");
  };
  auto write = [&](int layout, const std::string& f, const std::string& bytes) {
    WriteWholeFile(v.home("d/" + f), bytes);  // the home keeps name and size
    WriteWholeFile(v.fast("d/" + f), layout == 1   ? bytes
                                     : layout == 2 ? bytes.substr(0, 65536)
                                                   : "");
  };
  std::atomic<bool> done{false};
  ExerciseResult result;
  std::thread exerciser([&] {
    ExerciseOptions eo;
    eo.seed = GetParam() == "off" ? 77 : 78;
    eo.ops = ExerciseOps();
    eo.shifts_may_be_refused = true;
    result = Exercise({v.mnt("d/a"), v.mnt("d/b")}, eo);
    done = true;
  });
  // The control socket in this process, not sroutectl: a command run with
  // fork and exec closes this process's files in the child at exec, and
  // closing a FUSE file waits for the write-back of its mapped pages, which
  // the quiesce parks: the flipper would wait on itself.
  auto client = ControlClient::Connect(v.socket);
  ASSERT_TRUE(client.ok()) << client.status();
  auto call = [&](const std::string& what,
                  const std::function<void(proto::ControlRequest&)>& fill) {
    proto::ControlRequest req;
    fill(req);
    auto resp = (*client)->Call(req, absl::Seconds(30));
    if (!resp.ok()) return what + ": " + std::string(resp.status().message());
    if (resp->code() != 0) return what + ": " + resp->message();
    return std::string();
  };
  const std::string files = "<*, *, //home/d/*>";
  // Each file's layout: a file the exerciser has not made yet (or has
  // removed) is not moved, and keeps its rule.
  std::map<std::string, int> layout = {{"a", 0}, {"b", 0}};
  int flips = 0;
  std::string failure;
  while (!done && failure.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    failure = call("quiesce", [&](proto::ControlRequest& r) {
      r.mutable_quiesce()->set_pattern(files);
      r.mutable_quiesce()->set_on(true);
    });
    if (!failure.empty()) break;
    failure = call("drain", [&](proto::ControlRequest& r) {
      r.mutable_drain()->set_pattern(files);
    });
    for (auto& entry : layout) {
      // (Named, not bound: clang's lambdas cannot capture a structured
      // binding.)
      const std::string& f = entry.first;
      int& at = entry.second;
      if (!failure.empty() || !fs::exists(v.home("d/" + f))) continue;
      const int next = (at + 1 + flips % 2) % 3;
      write(next, f, read(at, f));
      if (at != 0) {
        const std::string rule = rules(at, f);
        failure = call("rules rm", [&](proto::ControlRequest& r) {
          r.mutable_delete_rules()->set_pattern(
              rule.substr(0, rule.find(" ->")));
        });
      }
      if (next != 0 && failure.empty()) {
        failure = call("rules add", [&](proto::ControlRequest& r) {
          r.mutable_add_rules()->add_text(rules(next, f));
        });
      }
      at = next;
    }
    ++flips;
    const std::string released = call("release", [&](proto::ControlRequest& r) {
      r.mutable_quiesce()->set_pattern(files);
      r.mutable_quiesce()->set_on(false);
    });
    if (failure.empty()) failure = released;
  }
  exerciser.join();
  ASSERT_TRUE(failure.empty()) << failure;
  EXPECT_GT(flips, 5);
  ASSERT_TRUE(result.ok) << result.error << "\n(after " << flips << " flips)";
}

INSTANTIATE_TEST_SUITE_P(KernelCache, RouteFlipTest,
                         ::testing::Values("off", "auto"),
                         [](const auto& info) { return info.param; });

// ---------------------------------------------------------------------------
// SQLite.

// Runs `sql` on the database at `path`; returns "" or the error.
std::string Sql(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string e = err != nullptr ? err : "error";
    sqlite3_free(err);
    return e;
  }
  return "";
}

std::string SqlValue(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  std::string out = "<error>";
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    const auto* t = sqlite3_column_text(st, 0);
    out = t != nullptr ? reinterpret_cast<const char*>(t) : "";
  }
  sqlite3_finalize(st);
  return out;
}

// A transaction workload: each transaction inserts rows and updates a
// running total, so that a committed state is always consistent.
std::string Workload(const std::string& path, const std::string& mode,
                     int transactions) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return "open failed";
  std::string e = Sql(db, "PRAGMA journal_mode=" + mode + ";");
  if (e.empty()) {
    e = Sql(
        db,
        "CREATE TABLE IF NOT EXISTS t(k INTEGER PRIMARY KEY, v BLOB);"
        "CREATE TABLE IF NOT EXISTS total(n INTEGER);"
        "INSERT INTO total SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM total);");
  }
  for (int i = 0; e.empty() && i < transactions; ++i) {
    e = Sql(db,
            "BEGIN; INSERT INTO t(v) VALUES (randomblob(3000)), "
            "(randomblob(500)); UPDATE total SET n = n + 2; "
            "DELETE FROM t WHERE k % 7 = 0 AND k < (SELECT max(k) - 50 FROM t);"
            "UPDATE total SET n = (SELECT count(*) FROM t); COMMIT;");
  }
  sqlite3_close(db);
  return e;
}

std::string Check(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) return "open failed";
  std::string out = SqlValue(db, "PRAGMA integrity_check;");
  if (out == "ok") {
    const std::string rows = SqlValue(db, "SELECT count(*) FROM t;");
    const std::string total = SqlValue(db, "SELECT n FROM total;");
    if (rows != total) out = "rows " + rows + " but total " + total;
  }
  sqlite3_close(db);
  return out;
}

struct SqliteCase {
  const char* name;
  const char* kernel_cache;
  bool remote;       // the routed directory is on a storage server
  const char* mode;  // journal mode
  // A cache stage the database's IO passes on its way to fast/ (--stage).
  const char* stage = nullptr;
};

class SqliteTest : public ::testing::TestWithParam<SqliteCase> {};

TEST_P(SqliteTest, TransactionsSurviveAKilledWriter) {
  const SqliteCase& c = GetParam();
  Volume::Options o;
  o.kernel_cache = c.kernel_cache;
  o.remote_fast = c.remote;
  o.rules = "<*, *, //home/db/*> -> <IO, //fast/db/*>";
  if (c.stage != nullptr) {
    o.rules =
        "<*, *, //home/db/*> -> <IO, stage:c>\n"
        "<stage:c, *, //home/db/*> -> <IO, //fast/db/*>";
    o.extra = {"--stage", c.stage};
  }
  Volume v(o);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(mkdir(v.mnt("db").c_str(), 0755), 0);
  const std::string path = v.mnt("db/x.db");
  ASSERT_EQ(Workload(path, c.mode, 50), "");
  ASSERT_EQ(Check(path), "ok");
  ASSERT_TRUE(fs::exists(v.fast("db/x.db"))) << "the rule did not route it";
  // A writer killed mid-transaction.
  for (int round = 0; round < 3; ++round) {
    const pid_t pid = fork();
    if (pid == 0) {
      Workload(path, c.mode, 1000000);
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + 100 * round));
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    EXPECT_EQ(Check(path), "ok") << "after kill " << round;
  }
  ASSERT_EQ(Workload(path, c.mode, 20), "");
  EXPECT_EQ(Check(path), "ok");
}

INSTANTIATE_TEST_SUITE_P(
    Modes, SqliteTest,
    ::testing::Values(
        SqliteCase{"wal_auto", "auto", false, "WAL"},
        SqliteCase{"rollback_auto", "auto", false, "DELETE"},
        SqliteCase{"wal_cache_off", "off", false, "WAL"},
        SqliteCase{"rollback_cache_off", "off", false, "DELETE"},
        SqliteCase{"wal_server", "off", true, "WAL"},
        SqliteCase{"rollback_server", "auto", true, "DELETE"},
        SqliteCase{"wal_through_cache", "off", false, "WAL",
                   "c=cache:partition_bytes=256K"},
        SqliteCase{"rollback_through_cache_to_server", "auto", true, "DELETE",
                   "c=cache:partition_bytes=256K,policy=lru"},
        SqliteCase{"wal_through_write_back_cache", "off", false, "WAL",
                   "c=cache:partition_bytes=256K,"
                   "write_mode=write_back,dirty_limit_bytes=64K"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------
// A cache stage on the volume and a daemon killed mid-write: a write-through
// cache loses no acknowledged write; a write-back cache loses no fsynced
// block, and at most its dirty limit of the rest. Closes write back too.

struct CrashCase {
  const char* name;
  const char* stage;
  bool write_back;
  uint64_t dirty_limit;
};

class CacheCrashTest : public ::testing::TestWithParam<CrashCase> {};

TEST_P(CacheCrashTest, AKilledDaemonLosesNothingItPromised) {
  const CrashCase& c = GetParam();
  constexpr size_t kBlock = 4096;
  Volume::Options o;
  o.kernel_cache = "off";
  o.rules = "<*, *, //home/d/*> -> <IO, stage:c>";
  o.extra = {"--stage", c.stage};
  Volume v(o);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(mkdir(v.mnt("d").c_str(), 0755), 0);
  auto block = [&](uint64_t i, uint64_t round) {
    std::string b(kBlock, '\0');
    char stamp[40];
    const int len = std::snprintf(stamp, sizeof(stamp), "%lu:%lu;",
                                  static_cast<unsigned long>(i),
                                  static_cast<unsigned long>(round));
    for (size_t k = 0; k < kBlock; ++k) b[k] = stamp[k % len];
    return b;
  };
  // close(2) returns once the file is written back.
  {
    const int fd = open(v.mnt("d/closed").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    for (uint64_t i = 0; i < 16; ++i) {
      ASSERT_EQ(pwrite(fd, block(i, 0).data(), kBlock, i * kBlock),
                static_cast<ssize_t>(kBlock));
    }
    ASSERT_EQ(close(fd), 0);
    std::string want;
    for (uint64_t i = 0; i < 16; ++i) want += block(i, 0);
    EXPECT_EQ(ReadWholeFile(v.home("d/closed")), want);
  }
  // The writer: writes block after block (over a 256-block file, round
  // after round), fsyncs every 8th, and logs what was acknowledged.
  const std::string log = v.dir / "log";
  WriteWholeFile(v.home("d/f"), "");
  const pid_t writer = fork();
  if (writer == 0) {
    const int fd = open(v.mnt("d/f").c_str(), O_WRONLY);
    const int lf = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0 || lf < 0) _exit(2);
    for (uint64_t n = 0;; ++n) {
      const uint64_t i = n % 256, round = n / 256;
      if (pwrite(fd, block(i, round).data(), kBlock, i * kBlock) !=
          static_cast<ssize_t>(kBlock)) {
        _exit(0);
      }
      std::string line = "W " + std::to_string(n) + "\n";
      if (n % 8 == 7) {
        if (fsync(fd) != 0) _exit(0);
        line += "S " + std::to_string(n) + "\n";
      }
      if (write(lf, line.data(), line.size()) < 0 || fdatasync(lf) != 0) {
        _exit(3);
      }
    }
  }
  // Killed once the writer has logged 100 acknowledged writes.
  auto logged = [&] {
    const std::string l = ReadWholeFile(log);
    return std::count(l.begin(), l.end(), 'W');
  };
  const bool started = Eventually([&] { return logged() > 100; }, 60);
  v.volume->Kill();
  int status = 0;
  waitpid(writer, &status, 0);
  ASSERT_TRUE(started) << "the writer logged " << logged() << " writes";
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;

  // What the backend holds, block by block, against the log.
  const std::string data = ReadWholeFile(v.home("d/f"));
  int64_t last_written = -1, last_synced = -1;
  {
    std::istringstream in(ReadWholeFile(log));
    std::string kind;
    int64_t n;
    while (in >> kind >> n) (kind == "S" ? last_synced : last_written) = n;
  }
  ASSERT_GT(last_written, 64) << "the writer barely started";
  uint64_t lost = 0;
  for (int64_t n = std::max<int64_t>(0, last_written - 255); n <= last_written;
       ++n) {
    const uint64_t i = n % 256, round = n / 256;
    // The newest acknowledged write of block i is n (the last 256 writes
    // are of distinct blocks).
    const std::string have =
        data.size() >= (i + 1) * kBlock ? data.substr(i * kBlock, kBlock) : "";
    if (have == block(i, round)) continue;
    // The write after the last acknowledged one may have landed without
    // its acknowledgement reaching the writer: newer bytes, not lost ones.
    if (n + 256 == last_written + 1 && have == block(i, round + 1)) continue;
    if (!c.write_back || n <= last_synced) {
      ADD_FAILURE() << "block " << i << " of acknowledged write " << n
                    << " is not in the backend (last fsync after write "
                    << last_synced << ")";
      break;
    }
    ++lost;
  }
  EXPECT_LE(lost * kBlock, c.dirty_limit) << lost << " blocks lost";
  std::printf("%s: %ld writes acknowledged, %ld fsynced, %lu blocks lost\n",
              c.name, static_cast<long>(last_written + 1),
              static_cast<long>(last_synced + 1),
              static_cast<unsigned long>(lost));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, CacheCrashTest,
    ::testing::Values(
        CrashCase{"write_through", "c=cache:partition_bytes=512K", false, 0},
        CrashCase{"write_back",
                  "c=cache:partition_bytes=2M,write_mode=write_back,"
                  "dirty_limit_bytes=128K",
                  true, 128 * 1024}),
    [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------
// Copies of ranged and scattered files with the tools users copy with.

class CopyToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Volume::Options o;
    o.rules =
        "<*, r|w, //home/r/f[0:64K]> -> <IO, //fast/rf>\n"
        "<*, r|w, //home/r/f[100K:150K]> -> <IO, //fast/rf2>\n"
        "<*, w, //home/s/*> -> <IO, //home/s/*>, <IO, //fast/s/*>\n"
        "<*, r|w, //home/dst/*[0:64K]> -> <IO, //fast/dst/*>";
    v_ = std::make_unique<Volume>(o);
    ASSERT_TRUE(v_->ok());
    Volume::Options plain;
    other_ = std::make_unique<Volume>(plain);
    ASSERT_TRUE(other_->ok());
    for (const char* d : {"r", "s", "dst", "out"}) {
      ASSERT_EQ(mkdir(v_->mnt(d).c_str(), 0755), 0);
    }
    src_ = std::string(300000, '\0');
    unsigned x = 12345;
    for (char& c : src_)
      c = static_cast<char>((x = x * 1103515245 + 12345) >> 16);
    WriteWholeFile(tmp_ / "src", src_);
    for (const char* f : {"r/f", "s/f"}) {
      auto [rc, out] = RunCommand("cp " + tmp_ / "src" + " " + v_->mnt(f));
      ASSERT_EQ(rc, 0) << out;
      ASSERT_EQ(ReadAll(v_->mnt(f)), src_) << f;
    }
  }
  void Expect(const std::string& cmd, const std::string& result) {
    auto [rc, out] = RunCommand(cmd);
    ASSERT_EQ(rc, 0) << cmd << ": " << out;
    EXPECT_EQ(ReadAll(result), src_) << cmd;
  }
  TempDir tmp_;
  std::unique_ptr<Volume> v_, other_;
  std::string src_;
};

TEST_F(CopyToolsTest, CopiesAreByteIdentical) {
  for (const char* f : {"r/f", "s/f"}) {
    SCOPED_TRACE(f);
    const std::string from = v_->mnt(f);
    Expect("cp " + from + " " + v_->mnt("out/cp"), v_->mnt("out/cp"));
    Expect("cp --reflink=never " + from + " " + v_->mnt("dst/g"),
           v_->mnt("dst/g"));
    Expect("cp " + from + " " + other_->mnt("cp"), other_->mnt("cp"));
    Expect("cp " + v_->mnt("dst/g") + " " + tmp_ / "back", tmp_ / "back");
    Expect("rsync " + from + " " + v_->mnt("dst/rs"), v_->mnt("dst/rs"));
    Expect("rsync " + from + " " + other_->mnt("rs"), other_->mnt("rs"));
    Expect("tar -C " + v_->mnt() + " -cf " + tmp_ / "t.tar" + " " + f +
               " && mkdir -p " + other_->mnt("x") + " && tar -C " +
               other_->mnt("x") + " -xf " + tmp_ / "t.tar",
           other_->mnt(std::string("x/") + f));
    Expect("tar -C " + v_->mnt() + " -cf - " + f + " | tar -C " +
               v_->mnt("dst") + " -xf - --transform='s|.*/|t_|'",
           v_->mnt("dst/t_f"));
    for (const char* g : {"out/cp", "dst/g", "dst/rs", "dst/t_f"}) {
      ASSERT_EQ(unlink(v_->mnt(g).c_str()), 0) << g;
    }
  }
  // The scattered copies are identical too.
  EXPECT_EQ(ReadAll(v_->fast("s/f")), src_);
  EXPECT_EQ(ReadAll(v_->home("s/f")), src_);
}

// ---------------------------------------------------------------------------
// The six symptoms of the trust issue, as reported.

TEST(TrustSymptomsTest, FilesBelongToTheirCreator) {
  Volume v(Volume::Options{});
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(mkdir(v.mnt("t").c_str(), 01777), 0);
  ASSERT_EQ(chmod(v.mnt("t").c_str(), 01777), 0);
  auto [rc, out] = RunCommand(
      "setpriv --reuid 65534 --regid 65534 "
      "--clear-groups touch " +
      v.mnt("t/f"));
  ASSERT_EQ(rc, 0) << out;
  struct stat st {};
  ASSERT_EQ(stat(v.mnt("t/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
  EXPECT_EQ(st.st_gid, 65534u);
  ASSERT_EQ(stat(v.home("t/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u) << "the backing file's owner";
}

TEST(TrustSymptomsTest, SharedMmapOfRoutedAndUncachedFiles) {
  for (const char* cache : {"off", "auto"}) {
    Volume::Options o;
    o.kernel_cache = cache;
    o.rules = "<*, r|w, //home/f[0:64K]> -> <IO, //fast/f>";
    Volume v(o);
    ASSERT_TRUE(v.ok());
    const int fd = open(v.mnt("f").c_str(), O_RDWR | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 100000), 0);
    void* p = mmap(nullptr, 100000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(p, MAP_FAILED) << cache << ": " << std::strerror(errno);
    auto* c = static_cast<char*>(p);
    std::memcpy(c, "hello", 5);
    std::memcpy(c + 70000, "world", 5);
    ASSERT_EQ(msync(p, 100000, MS_SYNC), 0);
    munmap(p, 100000);
    close(fd);
    const std::string got = ReadAll(v.mnt("f"));
    ASSERT_EQ(got.size(), 100000u);
    EXPECT_EQ(got.substr(0, 5), "hello");
    EXPECT_EQ(got.substr(70000, 5), "world");
    // The range went to its route.
    EXPECT_EQ(ReadAll(v.fast("f")).substr(0, 5), "hello") << cache;
  }
}

TEST(TrustSymptomsTest, TruncationReachesByteRangeDetours) {
  Volume::Options o;
  o.rules = "<*, r|w, //home/f[0:64K]> -> <IO, //fast/f>";
  Volume v(o);
  ASSERT_TRUE(v.ok());
  auto [rc, out] = RunCommand("printf AAAAAAAAAA > " + v.mnt("f") + "; : > " +
                              v.mnt("f") + "; truncate -s 10 " + v.mnt("f"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(ReadAll(v.mnt("f")), std::string(10, '\0'));
}

TEST(TrustSymptomsTest, CpOfARangedFile) {
  Volume::Options o;
  o.rules = "<*, r|w, //home/f[0:64K]> -> <IO, //fast/f>";
  Volume v(o);
  ASSERT_TRUE(v.ok());
  TempDir tmp;
  std::string src(100000, '\0');
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 3);
  WriteWholeFile(tmp / "src", src);
  auto [rc, out] = RunCommand("cp " + tmp / "src" + " " + v.mnt("f") +
                              " && cp " + v.mnt("f") + " " + v.mnt("g") +
                              " && cmp " + v.mnt("f") + " " + v.mnt("g"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(ReadAll(v.mnt("g")), src);
}

TEST(TrustSymptomsTest, ScatteredFilesStayIdenticalOnTruncate) {
  Volume::Options o;
  o.rules = "<*, w, //home/s> -> <IO, //home/s>, <IO, //fast/s>";
  Volume v(o);
  ASSERT_TRUE(v.ok());
  const int fd = open(v.mnt("s").c_str(), O_RDWR | O_CREAT, 0640);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 100000), 0) << std::strerror(errno);
  ASSERT_EQ(pwrite(fd, "tail", 4, 99996), 4);
  close(fd);
  EXPECT_EQ(ReadAll(v.home("s")), ReadAll(v.fast("s")));
  EXPECT_EQ(ReadAll(v.fast("s")).size(), 100000u);
  struct stat home {
  }, replica{};
  ASSERT_EQ(stat(v.home("s").c_str(), &home), 0);
  ASSERT_EQ(stat(v.fast("s").c_str(), &replica), 0);
  EXPECT_EQ(replica.st_mode, home.st_mode) << "the replica has the home's mode";
}

// POSIX keeps an unlinked file usable while open, also when it has copies.
TEST(TrustSymptomsTest, UnlinkedOpenScatteredFileStaysUsable) {
  Volume::Options o;
  o.rules = "<*, w, //home/d/*> -> <IO, //home/d/*>, <IO, //fast/d/*>";
  Volume v(o);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(mkdir(v.mnt("d").c_str(), 0755), 0);
  const int fd = open(v.mnt("d/f").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "before", 6, 0), 6);
  EXPECT_TRUE(fs::exists(v.fast("d/f")));
  ASSERT_EQ(unlink(v.mnt("d/f").c_str()), 0);
  EXPECT_FALSE(fs::exists(v.mnt("d/f")));
  EXPECT_FALSE(fs::exists(v.fast("d/f"))) << "the copy went with the name";
  ASSERT_EQ(pwrite(fd, "after!", 6, 6), 6) << std::strerror(errno);
  char buf[12];
  ASSERT_EQ(pread(fd, buf, 12, 0), 12);
  EXPECT_EQ(std::string(buf, 12), "beforeafter!");
  close(fd);
  // A new file of that name starts empty, on both targets.
  WriteWholeFile(v.mnt("d/f"), "new");
  EXPECT_EQ(ReadAll(v.fast("d/f")), "new");
}

// A folder routed away from the home whose one file was unlinked while
// open (hidden in that folder, as NFS clients hide theirs) is removed as on
// a local file system, also right after a close whose release the kernel
// sends late; the open file stays usable, and no hidden name outlives it.
TEST(TrustSymptomsTest, AFolderWhoseFileIsUnlinkedWhileOpenCanBeRemoved) {
  Volume::Options o;
  o.rules = "<*, *, //home/r/*> -> <IO, //fast/r/*>";
  Volume v(o);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(mkdir(v.mnt("r").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(v.fast("r").c_str(), 0755), 0);
  auto listing = [&](const std::string& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(v.fast(dir))) {
      names.push_back(e.path().filename().string());
    }
    return names;
  };
  ASSERT_EQ(mkdir(v.mnt("r/d").c_str(), 0755), 0);
  ASSERT_TRUE(fs::is_directory(v.fast("r/d"))) << "the rule did not route it";
  const int fd = open(v.mnt("r/d/f").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "before", 6, 0), 6);
  ASSERT_EQ(unlink(v.mnt("r/d/f").c_str()), 0);
  EXPECT_EQ(rmdir(v.mnt("r/d").c_str()), 0) << std::strerror(errno);
  EXPECT_FALSE(fs::exists(v.fast("r/d")));
  ASSERT_EQ(pwrite(fd, "after!", 6, 6), 6) << std::strerror(errno);
  char buf[12];
  ASSERT_EQ(pread(fd, buf, 12, 0), 12);
  EXPECT_EQ(std::string(buf, 12), "beforeafter!");
  EXPECT_EQ(listing("r").size(), 1u) << "hidden in the parent while open";
  close(fd);
  // A folder that holds a file besides the hidden one is not empty.
  ASSERT_EQ(mkdir(v.mnt("r/e").c_str(), 0755), 0);
  WriteWholeFile(v.mnt("r/e/kept"), "kept");
  const int fd2 = open(v.mnt("r/e/f").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd2, 0);
  ASSERT_EQ(unlink(v.mnt("r/e/f").c_str()), 0);
  EXPECT_EQ(rmdir(v.mnt("r/e").c_str()), -1);
  EXPECT_EQ(errno, ENOTEMPTY);
  close(fd2);
  ASSERT_EQ(unlink(v.mnt("r/e/kept").c_str()), 0);
  EXPECT_EQ(rmdir(v.mnt("r/e").c_str()), 0) << std::strerror(errno);
  // Made, closed, unlinked and removed at once, many times: the releases
  // come when the kernel sends them, maybe after the unlink.
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(mkdir(v.mnt("r/x").c_str(), 0755), 0) << i;
    WriteWholeFile(v.mnt("r/x/f"), "1");
    ASSERT_EQ(unlink(v.mnt("r/x/f").c_str()), 0) << i;
    ASSERT_EQ(rmdir(v.mnt("r/x").c_str()), 0)
        << i << ": " << std::strerror(errno);
  }
  // Every hidden name goes with its last handle (the releases are
  // asynchronous: wait for them, bounded).
  for (int i = 0; i < 500 && !listing("r").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::vector<std::string> left = listing("r");
  EXPECT_TRUE(left.empty()) << left.size() << " left, " << left[0];
}

// A scatter that fails on one target after another applied it fences the
// file; sroutectl lists and clears fences.
TEST(TrustSymptomsTest, PartialScatterFailureFencesTheFile) {
  Volume::Options o;
  o.rules = "<*, w, //home/s> -> <IO, //home/s>, <IO, //fast/s>";
  Volume v(o);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(mkdir(v.fast("s").c_str(), 0755), 0);  // the replica cannot be
  const int fd = open(v.mnt("s").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(pwrite(fd, "data", 4, 0), -1);
  EXPECT_EQ(errno, EISDIR);
  char buf[4];
  EXPECT_EQ(pread(fd, buf, 4, 0), -1) << "fenced";
  EXPECT_EQ(errno, EIO);
  auto [rc, out] = v.Ctl("fences");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("//home/s: write applied at //home/s, failed at //fast/s"),
            std::string::npos)
      << out;
  // The operator makes the copies identical, then clears the fence.
  ASSERT_EQ(rmdir(v.fast("s").c_str()), 0);
  WriteWholeFile(v.fast("s"), ReadAll(v.home("s")));
  std::tie(rc, out) = v.Ctl("fences --clear //home/s");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "");
  EXPECT_EQ(pwrite(fd, "more", 4, 0), 4);
  close(fd);
  EXPECT_EQ(ReadAll(v.fast("s")), ReadAll(v.home("s")));
}

// ---------------------------------------------------------------------------
// Kernel passthrough (fuse/passthrough.h): files nothing routes are served
// by the kernel from their backing files; nothing may bypass a route.

// The gauge `name` of the volume's stats (-1: not shown).
int64_t Gauge(const Volume& v, const std::string& name) {
  auto [rc, out] = v.Ctl("stats");
  const std::string key = "\n" + name + " ";
  const size_t at = out.find(key);
  if (rc != 0 || at == std::string::npos) return -1;
  return std::atoll(out.c_str() + at + key.size());
}

// The ops the default route served ("" if none), from the stats.
std::string UnmatchedOps(const Volume& v) {
  auto [rc, out] = v.Ctl("stats");
  const std::string key = "unmatched (default route):";
  const size_t at = out.find(key);
  if (at == std::string::npos) return "";
  return out.substr(at + key.size(), out.find('\n', at) - at - key.size());
}

TEST(PassthroughTest, UnroutedFilesBypassTheDaemonAndKeepTheirBytes) {
  Volume::Options o;
  o.rules = "<*, *, //home/r/*> -> <IO, //fast/r/*>";
  o.extra = {"--passthrough", "auto"};
  Volume v(o);
  ASSERT_TRUE(v.ok());
  // Reads, writes, appends, truncation and a shared mapping, past the
  // daemon.
  const std::string p = v.mnt("p");
  WriteWholeFile(p, std::string(100000, 'a'));
  int fd = open(p.c_str(), O_RDWR | O_APPEND);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "tail", 4), 4);
  close(fd);
  ASSERT_EQ(truncate(p.c_str(), 99990), 0);
  fd = open(p.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  void* map = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  std::memcpy(map, "mapped", 6);
  ASSERT_EQ(msync(map, 4096, MS_SYNC), 0);
  munmap(map, 4096);
  close(fd);
  const std::string want = "mapped" + std::string(99990 - 6, 'a');
  EXPECT_EQ(ReadAll(v.home("p")), want);
  EXPECT_EQ(ReadAll(p), want);
  EXPECT_GE(Gauge(v, "fuse_passthrough_opens"), 4);
  const std::string ops = UnmatchedOps(v);
  EXPECT_EQ(ops.find(" read "), std::string::npos) << ops;
  EXPECT_EQ(ops.find(" write "), std::string::npos) << ops;
  // A routed file goes through the daemon, to its route.
  ASSERT_EQ(mkdir(v.mnt("r").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(v.fast("r").c_str(), 0755), 0);
  WriteWholeFile(v.mnt("r/x"), "routed");
  EXPECT_EQ(ReadAll(v.fast("r/x")), "routed");
  EXPECT_GE(Gauge(v,
                  "fuse_passthrough_not: routed, tapped, quiesced or "
                  "watched"),
            1);
  // A set-ID file is not opened past the daemon (a write there would keep
  // the bits); nor may a file a user writes past the daemon be given
  // set-ID bits (that user's writes would clear them on a local disk).
  const testing::User user = testing::Grouped();
  WriteWholeFile(p, "x");
  ASSERT_EQ(chown(p.c_str(), user.uid, user.gid), 0);
  ASSERT_EQ(chmod(p.c_str(), 0666), 0);
  auto chmod_as = [&](const testing::User& who, mode_t mode) {
    return testing::RunAs(who, [&] {
      return chmod(p.c_str(), mode) == 0 ? std::string("ok")
                                         : std::string(strerror(errno));
    });
  };
  // Another user (nobody) holds it open for writing, in a child.
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  if (child == 0) {
    char c = 0;
    if (setgroups(0, nullptr) != 0 || setresgid(65534, 65534, 65534) != 0 ||
        setresuid(65534, 65534, 65534) != 0) {
      _exit(1);
    }
    const int wfd = open(p.c_str(), O_WRONLY);
    c = wfd >= 0 ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    (void)!read(go[0], &c, 1);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  EXPECT_EQ(Gauge(v, "fuse_passthrough_files_open"), 1);
  EXPECT_EQ(chmod_as(user, 04755), std::string(strerror(ETXTBSY)));
  (void)!write(go[1], &c, 1);
  int status = 0;
  waitpid(child, &status, 0);
  for (int f : {ready[0], ready[1], go[0], go[1]}) close(f);
  EXPECT_TRUE(
      Eventually([&] { return Gauge(v, "fuse_passthrough_files_open") == 0; }));
  EXPECT_EQ(chmod_as(user, 04755), "ok");
  fd = open(p.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(pwrite(fd, "y", 1, 0), 1);
  close(fd);
  EXPECT_GE(Gauge(v,
                  "fuse_passthrough_not: set-ID bits (a write past the "
                  "daemon would keep them)"),
            1);
  // Renamed while open: under a name nothing routes, the open goes on; to a
  // routed name, EXDEV (mv copies through the route).
  WriteWholeFile(v.mnt("q"), "q");
  fd = open(v.mnt("q").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(rename(v.mnt("q").c_str(), v.mnt("r/q").c_str()), -1);
  EXPECT_EQ(errno, EXDEV);
  ASSERT_EQ(rename(v.mnt("q").c_str(), v.mnt("q2").c_str()), 0);
  ASSERT_EQ(pwrite(fd, "Q", 1, 0), 1);
  close(fd);
  EXPECT_EQ(ReadAll(v.home("q2")), "Q");
}

// Writers open a file, write to it a few times and close it, again and
// again, while a rule that routes it elsewhere is added: the change waits
// for the opens under way (new ones wait meanwhile), so that no write
// after the change is made reaches the old place.
TEST(PassthroughTest, ARouteChangeUnderWritersLetsNoWriteBypassIt) {
  Volume::Options o;
  o.extra = {"--passthrough", "auto"};
  Volume v(o);
  ASSERT_TRUE(v.ok());
  const std::string f = v.mnt("log");
  WriteWholeFile(f, "");
  WriteWholeFile(v.fast("log"), "");  // where the route will send it
  std::atomic<bool> stop{false}, made{false};
  std::atomic<int> seq{0}, errors{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&] {
      while (!stop) {
        // O_CLOEXEC: sroutectl, forked meanwhile, must not hold it open.
        const int fd = open(f.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
        if (fd < 0) {
          ++errors;
          continue;
        }
        for (int i = 0; i < 5; ++i) {
          // "SEQ 1" for a write begun once the change was made.
          const std::string line =
              std::to_string(++seq) + " " + (made ? "1" : "0") + "\n";
          if (write(fd, line.data(), line.size()) !=
              static_cast<ssize_t>(line.size())) {
            ++errors;
          }
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        close(fd);
      }
    });
  }
  EXPECT_TRUE(Eventually([&] { return seq > 200; }));
  auto [rc, out] = v.Ctl("rules add '<*, *, //home/log> -> <IO, //fast/log>'");
  made = true;
  const int made_at = seq.load();
  EXPECT_TRUE(Eventually([&] { return seq > made_at + 200; }));
  stop = true;
  for (std::thread& t : writers) t.join();
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(errors.load(), 0);
  auto lines = [](const std::string& text, int* after) {
    std::istringstream in(text);
    int n = 0;
    for (std::string line; std::getline(in, line); ++n) {
      if (line.size() > 2 && line.substr(line.size() - 2) == " 1") ++*after;
    }
    return n;
  };
  int home_after = 0, fast_after = 0;
  EXPECT_GT(lines(ReadAll(v.home("log")), &home_after), 100);
  EXPECT_GT(lines(ReadAll(v.fast("log")), &fast_after), 100);
  EXPECT_EQ(home_after, 0) << "writes after the change bypassed its route";
  EXPECT_GT(fast_after, 100);
  EXPECT_GE(Gauge(v, "fuse_passthrough_opens"), 20);
}

// A file held open past the daemon longer than the volume waits: the
// change fails, naming it, and changes nothing; once closed, it is made.
TEST(PassthroughTest, AFileHeldOpenMakesTheChangeFailCleanly) {
  Volume::Options o;
  o.extra = {"--passthrough", "auto", "--passthrough-wait-ms", "300"};
  Volume v(o);
  ASSERT_TRUE(v.ok());
  WriteWholeFile(v.mnt("held"), "");
  WriteWholeFile(v.fast("held"), "");  // where the route will send it
  const int fd = open(v.mnt("held").c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  auto [rc, out] =
      v.Ctl("rules add '<*, *, //home/held> -> <IO, //fast/held>'");
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("open with kernel passthrough"), std::string::npos) << out;
  EXPECT_NE(out.find("//home/held"), std::string::npos) << out;
  std::tie(rc, out) = v.Ctl("rules ls");
  EXPECT_EQ(out.find("held"), std::string::npos) << out;
  ASSERT_EQ(pwrite(fd, "before", 6, 0), 6);
  close(fd);
  EXPECT_EQ(ReadAll(v.home("held")), "before");
  ASSERT_TRUE(Eventually([&] {
    return v.Ctl("rules add '<*, *, //home/held> -> <IO, //fast/held>'")
               .first == 0;
  }));
  WriteWholeFile(v.mnt("held"), "after");
  EXPECT_EQ(ReadAll(v.fast("held")), "after");
}

// Where the kernel refuses a backing file (here: a volume whose backing
// directory is itself on a volume with passthrough, too deep a stack), the
// open goes through the daemon, and says why.
TEST(PassthroughTest, FallsBackWhereTheKernelRefuses) {
  Volume::Options o;
  o.extra = {"--passthrough", "auto"};
  Volume outer(o);
  ASSERT_TRUE(outer.ok());
  ASSERT_EQ(mkdir(outer.mnt("inner").c_str(), 0755), 0);
  TempDir mnt, dir;
  const std::string socket = dir / "inner.sock";
  MountedVolume inner(SROUTE_FUSE_BINARY, mnt.path(),
                      {"--backing", outer.mnt("inner"), "--passthrough", "auto",
                       "--control", socket});
  ASSERT_TRUE(inner.ok());
  WriteWholeFile(mnt / "f", "through the daemon");
  EXPECT_EQ(ReadAll(mnt / "f"), "through the daemon");
  EXPECT_EQ(ReadAll(outer.home("inner/f")), "through the daemon");
  auto [rc, out] = RunCommand(std::string(SROUTECTL_BINARY) +
                              " --host unix:" + socket + " stats");
  EXPECT_NE(out.find("fuse_passthrough_not: the backing file is on a stacked "
                     "file system"),
            std::string::npos)
      << out;
}

TEST(TrustSymptomsTest, PathsDeeperThanPathMax) {
  for (bool remote : {false, true}) {
    Volume::Options o;
    o.remote_backing = remote;
    Volume v(o);
    ASSERT_TRUE(v.ok());
    static const std::vector<Scenario> all = testing::PosixScenarios();
    const Scenario& s = FindScenario(all, "deeper_than_path_max");
    TempDir plain;
    ASSERT_EQ(mkdir(v.mnt("deep").c_str(), 0755), 0);
    const std::string got = s.run(v.mnt("deep"));
    EXPECT_EQ(got, s.run(plain.path())) << (remote ? "remote" : "local");
    EXPECT_EQ(got.find("UNEXPECTED"), std::string::npos) << got;
  }
}

}  // namespace
}  // namespace sroute

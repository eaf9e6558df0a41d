// SPDX-License-Identifier: Apache-2.0
// sroute-trace: a storage traceroute. It taps the IOs of a file (or a
// pattern) on a host with a trace rule of its own, collects the paths of
// the sampled IOs, and shows one row per hop of their path, like mtr:
// samples, errors, last / mean / min / max / stdev / p50 / p99, the hop's
// own time and its share of the end-to-end time, the slowest hop marked.
//
//   sroute-trace --host unix:/run/vol.sock [--tenant T] [--op r|w|*]
//                [--rate R] [--count N] [--duration S] [--live] [--json]
//                [--plot FILE.svg] [--probe] PATH|PATTERN
//   sroute-trace --host unix:/run/vol.sock --slow [--threshold-ms N]
//
// PATH is a file as rules name it (//HOST/PATH, a prefix ending in '*',
// re:REGEX), a header pattern <SOURCE, OPS, FILE>, or a path inside a
// mounted sroute volume (then --probe can read it).
//
// The tap is owned by "sroute-trace:PID@HOSTNAME" under a lease the tool
// renews every interval: it is deleted on exit, on Ctrl-C or SIGTERM, and,
// when the tool is killed, by the host once the lease runs out.
//
// Exit codes: 0 done, 1 refused or bad input, 2 the host could not be
// reached.
#include <fcntl.h>
#include <ncurses.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "rules/parser.h"
#include "tools/sroutectl/format.h"
#include "tools/sroutectl/json_output.h"
#include "tools/sroutectl/target.h"
#include "tools/trace/path_report.h"
#include "tools/trace/tap_target.h"

namespace sroute::trace {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

struct Options {
  std::string controller;
  std::string host;
  std::string secret_file;
  std::string tenant = "*";
  std::string op = "*";
  double rate = 1.0;
  uint64_t count = 0;
  double duration_s = 0;
  uint32_t interval_ms = 1000;
  uint32_t lease_ms = 5000;
  bool live = false;
  bool json = false;
  std::string plot;
  bool probe = false;
  bool slow = false;
  int64_t threshold_ms = -1;
  std::string target;
};

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

int ExitCode(const absl::Status& s) { return absl::IsUnavailable(s) ? 2 : 1; }

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "sroute-trace: %s\n", std::string(s.message()).c_str());
  return ExitCode(s);
}

// The mount point of the sroute volume holding `path`, and the path
// relative to it; false if `path` is in none.
bool InSrouteMount(const std::string& path, std::string* mount,
                   std::string* rel) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return false;
  std::ifstream in("/proc/self/mountinfo");
  std::string line, best;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS ... - FSTYPE SOURCE SUPER
    std::vector<std::string> f;
    size_t pos = 0;
    while (pos < line.size()) {
      size_t sp = line.find(' ', pos);
      if (sp == std::string::npos) sp = line.size();
      f.push_back(line.substr(pos, sp - pos));
      pos = sp + 1;
    }
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 1 >= f.size()) continue;
    if (f[dash + 1] != "fuse.sroute") continue;
    const std::string& mp = f[4];
    const std::string r = resolved;
    if ((r == mp || r.rfind(mp + "/", 0) == 0) && mp.size() > best.size()) {
      best = mp;
    }
  }
  if (best.empty()) return false;
  *mount = best;
  *rel = std::string(resolved).substr(best.size());
  return true;
}

// The tap's pattern for `o.target`; *local gets the local path to probe.
absl::StatusOr<std::string> TapPattern(const Options& o, std::string* local) {
  const std::string& t = o.target;
  if (!t.empty() && t[0] == '<') {
    auto p = ParsePattern(t);
    if (!p.ok()) {
      return absl::InvalidArgumentError("pattern " + t + ": " +
                                        std::string(p.status().message()));
    }
    return FormatPattern(*p);
  }
  std::string file = t;
  if (t.rfind("//", 0) != 0 && t.rfind("re:", 0) != 0 && t != "*") {
    std::string mount, rel;
    if (!InSrouteMount(t, &mount, &rel)) {
      return absl::InvalidArgumentError(
          "'" + t +
          "' is neither a file as rules name it (//HOST/PATH, a prefix "
          "ending in '*', re:REGEX), a pattern <...>, nor a path inside a "
          "mounted sroute volume");
    }
    file = "//home" + (rel.empty() ? std::string("/") : rel);
    *local = t;
  }
  const std::string text = "<" + o.tenant + ", " + o.op + ", " + file + ">";
  auto p = ParsePattern(text);
  if (!p.ok()) {
    return absl::InvalidArgumentError("pattern " + text + ": " +
                                      std::string(p.status().message()));
  }
  return FormatPattern(*p);
}

std::string OwnerName() {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  return "sroute-trace:" + std::to_string(getpid()) + "@" + host;
}

// Small reads of `path` while the trace runs, so that a quiet path is
// traced too (like traceroute's probes): about `per_second` 4 KiB reads at
// random offsets, past the kernel's page cache.
class Prober {
 public:
  Prober(std::string path, int per_second)
      : path_(std::move(path)), per_second_(per_second) {}
  absl::Status Start() {
    fd_ = open(path_.c_str(), O_RDONLY | O_DIRECT);
    if (fd_ < 0) fd_ = open(path_.c_str(), O_RDONLY);
    if (fd_ < 0) {
      return absl::InvalidArgumentError("--probe: cannot open " + path_ + ": " +
                                        strerror(errno));
    }
    thread_ = std::thread([this] { Run(); });
    return absl::OkStatus();
  }
  ~Prober() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) close(fd_);
  }
  uint64_t errors() const { return errors_; }

 private:
  void Run() {
    void* buf = nullptr;
    if (posix_memalign(&buf, 4096, 4096) != 0) return;
    std::mt19937_64 rng(getpid());
    while (!stop_) {
      struct stat st;
      const off_t size = fstat(fd_, &st) == 0 ? st.st_size : 0;
      const off_t blocks = std::max<off_t>(1, size / 4096);
      const off_t off = static_cast<off_t>(rng() % blocks) * 4096;
      if (pread(fd_, buf, 4096, off) < 0) ++errors_;
      posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
      std::this_thread::sleep_for(
          std::chrono::microseconds(1000000 / per_second_));
    }
    free(buf);
  }
  const std::string path_;
  const int per_second_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> errors_{0};
  std::thread thread_;
};

// A full-screen table, redrawn (like mtr).
class LiveScreen {
 public:
  LiveScreen() {
    initscr();
    cbreak();
    noecho();
    nodelay(stdscr, TRUE);
    curs_set(0);
  }
  ~LiveScreen() { endwin(); }
  void Draw(const std::string& text) {
    erase();
    int row = 0;
    size_t pos = 0;
    while (pos < text.size() && row < LINES) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      mvaddnstr(row++, 0, text.c_str() + pos, static_cast<int>(nl - pos));
      pos = nl + 1;
    }
    mvaddstr(LINES - 1, 0, "q: quit");
    refresh();
  }
  bool QuitPressed() { return getch() == 'q'; }
};

int RunSlow(const Options& o) {
  uint64_t after = 0;
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::milliseconds(static_cast<int64_t>(
                         (o.duration_s > 0 ? o.duration_s : 0) * 1000));
  bool first = true;
  for (;;) {
    proto::ControlRequest req;
    req.mutable_slow_ops()->set_after(after);
    if (first && o.threshold_ms >= 0) {
      req.mutable_slow_ops()->set_set_threshold(true);
      req.mutable_slow_ops()->set_threshold_ns(
          static_cast<uint64_t>(o.threshold_ms) * 1000000);
    }
    req.mutable_slow_ops()->set_stale_ms(std::max<uint32_t>(
        1, static_cast<uint32_t>(o.threshold_ms > 0 ? o.threshold_ms : 500)));
    auto resp = ctl::CallHost(o.host, o.secret_file, req, kCallTimeout);
    if (!resp.ok()) return Fail(resp.status());
    for (const proto::TraceRecord& r : resp->slow_recent()) {
      after = std::max(after, r.seq());
    }
    ctl::Report report = ctl::SlowOpsReport(*resp);
    std::string stale;
    for (const proto::StaleIoRecord& s : resp->stale()) {
      const std::string state = s.parked() ? "parked at a quiesce"
                                : s.waiting_at().empty()
                                    ? "in flight (routing)"
                                    : "in flight at " + s.waiting_at();
      stale += ctl::Printf(
          "still %s: %s %s %s [%llu, +%llu) for at least %.1f ms\n",
          state.c_str(), s.source().c_str(), s.op().c_str(), s.file().c_str(),
          static_cast<unsigned long long>(s.offset()),
          static_cast<unsigned long long>(s.length()), s.age_ns() / 1e6);
    }
    if (o.json) {
      std::fputs(report.json.c_str(), stdout);
    } else {
      std::fputs(report.text.c_str(), stdout);
      std::fputs(stale.c_str(), stdout);
    }
    std::fflush(stdout);
    first = false;
    if (o.duration_s <= 0 || g_stop ||
        std::chrono::steady_clock::now() >= until) {
      return 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(o.interval_ms));
    if (g_stop) return 0;
  }
}

int Run(const Options& o) {
  if (o.slow) return RunSlow(o);
  if (o.target.empty()) {
    return Fail(absl::InvalidArgumentError("give a PATH or PATTERN to trace"));
  }
  if (o.rate < 0 || o.rate > 1) {
    return Fail(absl::InvalidArgumentError("--rate must be in [0, 1]"));
  }
  std::string local;
  auto pattern = TapPattern(o, &local);
  if (!pattern.ok()) return Fail(pattern.status());
  if (o.probe && local.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--probe reads the file: give PATH as a path inside a mounted sroute "
        "volume"));
  }
  auto tap = ParsePattern(*pattern);
  if (o.probe && (tap->ops & kOpClassRead) == 0) {
    return Fail(
        absl::InvalidArgumentError("--probe sends reads: trace --op r or *"));
  }
  // The tap's fields, as rule text: "<SOURCE, OPS, FILE>" (only FILE, a
  // quoted regex, may hold ", ").
  const std::string text = FormatPattern(*tap);
  const size_t a = text.find(", "), b = text.find(", ", a + 2);
  const std::string tenant = text.substr(1, a - 1);
  const std::string ops = text.substr(a + 2, b - a - 2);
  const std::string file = text.substr(b + 2, text.size() - b - 3);

  std::unique_ptr<TapTarget> target =
      o.controller.empty()
          ? MakeHostTaps(o.host, o.secret_file)
          : MakeControllerTaps(o.controller, o.secret_file, o.host);
  auto path = target->FindPath(tenant, ops, file);
  if (!path.ok()) return Fail(path.status());
  const std::string owner = OwnerName();
  if (absl::Status s = target->Install(*path, tenant, ops, o.rate, owner,
                                       absl::Milliseconds(o.lease_ms));
      !s.ok()) {
    (void)target->Remove();
    return Fail(s);
  }
  const std::string title = "sroute-trace " + *pattern + " via " +
                            target->Describe() + ", sampling " +
                            ctl::Printf("%g", o.rate);
  if (!o.json && !o.live) {
    std::printf("%s\npath:\n", title.c_str());
    for (const PathStep& step : *path) {
      std::printf("  %s%s%s\n",
                  step.sswitch.empty() ? "" : (step.sswitch + " ").c_str(),
                  step.file.c_str(), step.entry ? "  (tapped)" : "");
      for (const std::string& r : step.rules)
        std::printf("    %s\n", r.c_str());
      if (step.rules.empty()) std::printf("    (no rule: the default route)\n");
    }
    std::fflush(stdout);
  }

  std::unique_ptr<Prober> prober;
  if (o.probe) {
    prober = std::make_unique<Prober>(local, 100);
    if (absl::Status s = prober->Start(); !s.ok()) {
      (void)target->Remove();
      return Fail(s);
    }
  }
  std::unique_ptr<LiveScreen> screen;
  if (o.live) screen = std::make_unique<LiveScreen>();

  PathReport report;
  uint64_t missed = 0;
  const auto start = std::chrono::steady_clock::now();
  absl::Status error;
  bool told_quiet = false;
  for (;;) {
    const bool done =
        g_stop || (o.count != 0 && report.ios() >= o.count) ||
        (o.duration_s > 0 && std::chrono::steady_clock::now() - start >=
                                 std::chrono::milliseconds(static_cast<int64_t>(
                                     o.duration_s * 1000)));
    if (done) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(
        o.count != 0 ? std::min<uint32_t>(o.interval_ms, 100) : o.interval_ms));
    if (error = target->Renew(); !error.ok()) break;
    auto traces = target->Collect(&missed);
    if (!traces.ok()) {
      error = traces.status();
      break;
    }
    for (const proto::TraceRecord& t : *traces) {
      if (o.count != 0 && report.ios() >= o.count) break;
      report.Add(t);
    }
    // Said once, on stderr: a tool waiting for traffic that never comes
    // must not look hung.
    if (!told_quiet && report.ios() == 0 && !screen &&
        std::chrono::steady_clock::now() - start >= std::chrono::seconds(5)) {
      told_quiet = true;
      std::fprintf(stderr,
                   "sroute-trace: no IO sampled in 5 s; waiting (is there "
                   "traffic on the path? try --probe)\n");
    }
    if (screen) {
      screen->Draw(report.Text(title));
      if (screen->QuitPressed()) break;
    }
  }
  // What was sampled since the last collection counts too: a stop (SIGINT,
  // the duration) may come right after the path's first IOs.
  if (error.ok() && (o.count == 0 || report.ios() < o.count)) {
    auto traces = target->Collect(&missed);
    if (traces.ok()) {
      for (const proto::TraceRecord& t : *traces) {
        if (o.count != 0 && report.ios() >= o.count) break;
        report.Add(t);
      }
    }
  }
  screen.reset();
  prober.reset();
  const absl::Status removed = target->Remove();
  if (!error.ok()) return Fail(error);
  if (o.json) {
    std::fputs(ctl::ToJson(report.Proto(*pattern)).c_str(), stdout);
  } else {
    std::fputs(report.Text(o.live ? title : "").c_str(), stdout);
    if (missed != 0) {
      std::printf(
          "(%llu traces were overwritten on a host before they were read: "
          "lower --interval-ms or --rate)\n",
          static_cast<unsigned long long>(missed));
    }
  }
  if (!o.plot.empty()) {
    std::ofstream svg(o.plot);
    svg << report.Svg(title);
    if (!svg) {
      return Fail(absl::InvalidArgumentError("--plot: cannot write " + o.plot));
    }
  }
  if (!removed.ok()) return Fail(removed);
  // A quiet path is not an error, but a table without rows must not pass
  // for a fast one.
  if (report.ios() == 0) {
    std::fprintf(stderr,
                 "sroute-trace: no IO matching %s was sampled%s; is there "
                 "traffic on the path (try --probe)?\n",
                 pattern->c_str(), o.rate == 0 ? " (--rate 0)" : "");
  } else if (o.count != 0 && report.ios() < o.count) {
    std::fprintf(stderr, "sroute-trace: %llu of the %llu IOs asked for\n",
                 static_cast<unsigned long long>(report.ios()),
                 static_cast<unsigned long long>(o.count));
  }
  return 0;
}

}  // namespace
}  // namespace sroute::trace

int main(int argc, char** argv) {
  sroute::trace::Options o;
  CLI::App app{"sroute-trace: where on its path an IO spends its time"};
  app.set_version_flag("--version",
                       std::string("sroute-trace ") + SROUTE_VERSION);
  app.add_option("--host", o.host,
                 "the host whose IOs to trace: unix:PATH (a FUSE host's "
                 "control socket) or HOST:PORT (a storage server); with "
                 "--controller, the sSwitch where the path starts (default: "
                 "every FUSE host)");
  app.add_option("--controller", o.controller,
                 "trace the whole path through the controller at HOST:PORT");
  app.add_option("--secret-file", o.secret_file,
                 "the cluster secret, for a storage server or the controller");
  app.add_option("--tenant", o.tenant, "only this tenant's IOs (default *)");
  app.add_option("--op", o.op, "r, w or * (default *); any op class list");
  app.add_option("--rate", o.rate,
                 "share of the IOs sampled, 0..1 (default 1)");
  app.add_option("--count", o.count,
                 "stop after N sampled IOs (with --duration: whichever comes "
                 "first)");
  app.add_option("--duration", o.duration_s, "stop after S seconds");
  app.add_option("--interval-ms", o.interval_ms,
                 "how often to collect and redraw (default 1000)")
      ->check(CLI::Range(10, 60000));
  app.add_option("--lease-ms", o.lease_ms,
                 "how long the host keeps the tap if the tool stops renewing "
                 "it (default 5000)")
      ->check(CLI::Range(100, 3600000));
  app.add_flag("--live", o.live, "a full-screen table, redrawn (like mtr)");
  app.add_flag("--json", o.json,
               "print proto CtlPathReport as JSON (--slow: CtlSlowOps, one "
               "a line per interval)");
  app.add_option("--plot", o.plot, "write an SVG of latency per hop over time");
  app.add_flag("--probe", o.probe,
               "send small reads of PATH (a path in a mounted volume) so a "
               "quiet path is traced too");
  app.add_flag("--slow", o.slow,
               "show the host's slow IOs and those still in flight past the "
               "threshold, instead of tracing");
  app.add_option("--threshold-ms", o.threshold_ms,
                 "with --slow: set the host's slow-IO threshold first");
  app.add_option("target", o.target, "PATH or PATTERN");
  CLI11_PARSE(app, argc, argv);

  struct sigaction sa = {};
  sa.sa_handler = sroute::trace::OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (o.count == 0 && o.duration_s <= 0 && !o.live && !o.slow && !o.json) {
    std::fprintf(stderr,
                 "sroute-trace: tracing until Ctrl-C (or give --count N / "
                 "--duration S)\n");
  }
  return sroute::trace::Run(o);
}

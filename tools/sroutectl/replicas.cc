// SPDX-License-Identifier: Apache-2.0
#include "tools/sroutectl/replicas.h"

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <iostream>

#include "tools/sroutectl/format.h"
#include "tools/sroutectl/json_output.h"

namespace sroute::ctl {
namespace {

int64_t CounterOf(const proto::StageStats& s, const std::string& name) {
  auto it = s.counters().find(name);
  return it == s.counters().end() ? 0 : it->second;
}

std::string Bytes(int64_t b) {
  if (b < 1024) return std::to_string(b) + " B";
  if (b < (1 << 20)) return Printf("%.1f KiB", b / 1024.0);
  if (b < (1ll << 30)) return Printf("%.1f MiB", b / 1048576.0);
  return Printf("%.2f GiB", b / 1073741824.0);
}

struct Member {
  std::string name;
  bool primary = false, in = false;
  int64_t stale_regions = 0, stale_bytes = 0, resynced = 0;
  std::string state;  // out, resyncing, current
  double eta_s = -1;  // -1: none
  int64_t reads = 0;  // served, since the stage began
};

std::vector<Member> MembersOf(const proto::StageStats& s) {
  std::vector<Member> out;
  const int64_t rate_now = CounterOf(s, "resync_bytes_per_s");
  const int64_t limit = CounterOf(s, "resync_rate");
  const bool paused = CounterOf(s, "resync_paused") != 0;
  for (const std::string& name : s.config().replica_set().member()) {
    Member m;
    m.name = name;
    const std::string p = "member." + name + ".";
    m.primary = CounterOf(s, p + "primary") != 0;
    m.in = CounterOf(s, p + "in") != 0;
    m.stale_regions = CounterOf(s, p + "stale_regions");
    m.stale_bytes = CounterOf(s, p + "stale_bytes");
    m.resynced = CounterOf(s, p + "resynced_bytes");
    m.reads = CounterOf(s, p + "reads");
    m.state = !m.in                  ? "out"
              : m.stale_regions == 0 ? "current"
              : paused               ? "stale (resync paused)"
                                     : "resyncing";
    const int64_t rate = rate_now > 0 ? rate_now : limit;
    if (m.in && m.stale_regions > 0 && !paused && rate > 0) {
      m.eta_s = static_cast<double>(m.stale_bytes) / static_cast<double>(rate);
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::string Bar(const Member& m) {
  const int64_t total = m.resynced + m.stale_bytes;
  const double done =
      total == 0 ? 1.0 : static_cast<double>(m.resynced) / total;
  const int width = 20;
  const int full = static_cast<int>(done * width);
  return "[" + std::string(full, '#') + std::string(width - full, '-') +
         Printf("] %3d%%", static_cast<int>(done * 100));
}

}  // namespace

Report ReplicaSetsReport(const proto::StageLists& lists,
                         const std::string& only, bool members, bool bars) {
  Report report;
  proto::CtlReplicaSets json;
  std::vector<std::vector<std::string>> sets = {
      {"SSWITCH", "SET", "MEMBERS", "READ", "ACK", "RESYNC"}};
  for (const proto::HostStages& h : lists.hosts()) {
    for (const proto::StageStats& s : h.stages()) {
      if (s.config().kind() != "replica_set") continue;
      if (!only.empty() && s.config().name() != only) continue;
      const proto::ReplicaSetOptions& o = s.config().replica_set();
      const std::vector<Member> ms = MembersOf(s);
      const bool paused = CounterOf(s, "resync_paused") != 0;
      const int64_t limit = CounterOf(s, "resync_rate");
      const std::string resync =
          (paused ? std::string("paused") : std::string("running")) + ", " +
          (limit == 0 ? std::string("no limit") : Bytes(limit) + "/s");
      std::string names;
      for (const Member& m : ms) {
        names += (names.empty() ? "" : " ") + m.name + (m.primary ? "*" : "") +
                 (m.in ? "" : "(out)");
      }
      const std::string ack =
          o.ack().empty() ? (o.member_size() >= 3 ? "quorum" : "all") : o.ack();
      sets.push_back({h.sswitch().empty() ? "-" : h.sswitch(),
                      s.config().name(), names,
                      o.read().empty() ? "primary" : o.read(), ack, resync});
      proto::CtlReplicaSet* set = json.add_sets();
      if (!h.sswitch().empty()) set->set_sswitch(Utf8Text(h.sswitch()));
      set->set_set(s.config().name());
      set->set_read(sets.back()[3]);
      set->set_ack(ack);
      set->set_resync_paused(paused);
      set->set_resync_rate(limit);
      set->set_resync_bytes_per_s(CounterOf(s, "resync_bytes_per_s"));
      set->set_resync_bytes(CounterOf(s, "resync_bytes"));
      set->set_conflicts(CounterOf(s, "conflicts"));
      for (const auto& [key, n] : s.counters()) {
        if (key.starts_with("conflict.")) {
          (*set->mutable_conflict_files())[key.substr(9)] = n;
        }
      }
      set->set_reads(CounterOf(s, "reads"));
      set->set_failovers(CounterOf(s, "failovers"));
      set->set_hedges(CounterOf(s, "hedges"));
      set->set_hedge_wins(CounterOf(s, "hedge_wins"));
      std::vector<std::vector<std::string>> rows = {
          {"MEMBER", "STATE", "STALE_REGIONS", "STALE", "RESYNCED", "ETA",
           "READS"}};
      for (const Member& m : ms) {
        std::vector<std::string> row = {
            m.name + (m.primary ? "*" : ""),
            m.state,
            std::to_string(m.stale_regions),
            Bytes(m.stale_bytes),
            Bytes(m.resynced),
            m.eta_s < 0 ? "-" : Printf("%.1f s", m.eta_s),
            std::to_string(m.reads)};
        if (bars && m.state == "resyncing") row.push_back(Bar(m));
        rows.push_back(std::move(row));
        proto::CtlReplicaMember* member = set->add_members();
        member->set_name(m.name);
        member->set_primary(m.primary);
        member->set_state(m.state);
        member->set_stale_regions(m.stale_regions);
        member->set_stale_bytes(m.stale_bytes);
        member->set_resynced_bytes(m.resynced);
        if (m.eta_s >= 0) member->set_eta_s(m.eta_s);
        member->set_reads(m.reads);
      }
      if (members) {
        report.text +=
            "replica set " + s.config().name() +
            (h.sswitch().empty() ? "" : " at " + h.sswitch()) + " (read " +
            sets.back()[3] + ", ack " + ack + "; resync " + resync + ")\n" +
            Table(rows) +
            "conflicts: " + std::to_string(CounterOf(s, "conflicts")) +
            " (regions no member in the set holds current)\n";
        for (const auto& [key, n] : s.counters()) {
          if (!key.starts_with("conflict.")) continue;
          report.text += "  " + key.substr(9) + ": " + std::to_string(n) +
                         " region(s); choose a copy: sroutectl ... replicas "
                         "resolve " +
                         s.config().name() + " " + key.substr(9) +
                         " --source MEMBER\n";
        }
      }
    }
  }
  if (!members && sets.size() > 1) report.text = Table(sets);
  report.json = ToJson(json);
  return report;
}

namespace {

// Lists the stages of `target` and prints the report `make` draws from
// them (as JSON with --json); `none` (an error) when it has no text.
int ShowStages(const Args& args, ControlTarget& target,
               const std::function<Report(const proto::StageLists&)>& make,
               const std::string& none) {
  proto::Stages req;
  req.set_action(proto::Stages::LIST);
  auto lists = target.StageStates(req);
  if (!lists.ok()) {
    std::cerr << "sroutectl: " << lists.status().message() << "\n";
    return absl::IsUnavailable(lists.status()) ? 2 : 1;
  }
  const Report r = make(*lists);
  if (!args.json && r.text.empty()) {
    std::cerr << "sroutectl: " << none << "\n";
    return 1;
  }
  std::cout << (args.json ? r.json : r.text);
  return 0;
}

}  // namespace

int ReplicasList(const Args& args, ControlTarget& target, bool members) {
  return ShowStages(
      args, target,
      [&](const proto::StageLists& lists) {
        return ReplicaSetsReport(lists, args.name, members,
                                 !args.json && ::isatty(1) != 0);
      },
      "no replica set" + (args.name.empty() ? "" : " named " + args.name));
}

Report GcStatusReport(const proto::StageLists& lists, const std::string& only,
                      int last) {
  Report report;
  proto::CtlGcStatus json;
  for (const proto::HostStages& h : lists.hosts()) {
    for (const proto::StageStats& s : h.stages()) {
      if (s.config().kind() != "replica_set") continue;
      if (!only.empty() && s.config().name() != only) continue;
      const proto::ReplicaSetOptions& o = s.config().replica_set();
      const std::string mode = o.gc().empty() ? "off" : o.gc();
      if (mode == "off" && only.empty()) continue;
      const uint32_t poll = o.has_gc_poll_us() ? o.gc_poll_us() : 1000;
      proto::CtlGcSet* set = json.add_sets();
      if (!h.sswitch().empty()) set->set_sswitch(Utf8Text(h.sswitch()));
      set->set_set(s.config().name());
      set->set_mode(mode);
      set->set_poll_us(poll);
      set->set_redirects(CounterOf(s, "gc_redirects"));
      set->set_granted_soft(CounterOf(s, "gc_granted_soft"));
      set->set_soft_delayed(CounterOf(s, "gc_soft_delayed"));
      set->set_granted_regular(CounterOf(s, "gc_granted_regular"));
      set->set_granted_bg(CounterOf(s, "gc_granted_bg"));
      set->set_device_passes(CounterOf(s, "gc_device_passes"));
      const std::pair<const char*, int64_t> counts[] = {
          {"redirects", set->redirects()},
          {"granted_soft", set->granted_soft()},
          {"soft_delayed", set->soft_delayed()},
          {"granted_regular", set->granted_regular()},
          {"granted_bg", set->granted_bg()},
          {"device_passes", set->device_passes()},
      };
      report.text += "replica set " + s.config().name() +
                     (h.sswitch().empty() ? "" : " at " + h.sswitch()) +
                     ": gc " + mode + ", devices asked every " +
                     std::to_string(poll) + " us\n";
      std::string line = " ";
      for (const auto& [key, value] : counts) {
        line += std::string(" ") + key + " " + std::to_string(value);
      }
      report.text += line + "\n";
      std::vector<std::vector<std::string>> members = {{"MEMBER", "GC"}};
      for (const std::string& m : o.member()) {
        const int64_t gc = CounterOf(s, "member." + m + ".gc");
        const std::string state = gc < 0 ? "not flash"
                                  : gc   ? "collecting"
                                         : "idle";
        members.push_back({m, state});
        proto::CtlGcMember* member = set->add_members();
        member->set_name(m);
        member->set_gc(state);
      }
      report.text += Table(members);
      const int n = s.gc_events_size();
      const int first = std::max(0, n - last);
      std::vector<std::vector<std::string>> rows = {
          {"MEMBER", "KIND", "START", "LASTED"}};
      for (int i = first; i < n; ++i) {
        const proto::GcEvent& e = s.gc_events(i);
        const absl::Time start = absl::FromUnixMicros(e.start_unix_us());
        rows.push_back(
            {e.member(), e.kind(),
             absl::FormatTime("%H:%M:%E3S", start, absl::LocalTimeZone()),
             Printf("%.1f ms",
                    static_cast<double>(e.end_unix_us() - e.start_unix_us()) /
                        1000)});
        *set->add_timeline() = e;
      }
      report.text += n == 0 ? "no GC pass yet\n"
                            : "the latest " + std::to_string(n - first) +
                                  " GC passes:\n" + Table(rows);
    }
  }
  report.json = ToJson(json);
  return report;
}

int GcStatus(const Args& args, ControlTarget& target) {
  return ShowStages(
      args, target,
      [&](const proto::StageLists& lists) {
        return GcStatusReport(lists, args.name, args.last);
      },
      "no replica set coordinates GC" +
          (args.name.empty() ? "" : " named " + args.name) +
          " (the gc_redirect app, or stages set NAME gc=MODE)");
}

int ReplicasChange(const Args& args, ControlTarget& target,
                   const std::string& what) {
  auto fail = [](const absl::Status& s) {
    std::cerr << "sroutectl: " << s.message() << "\n";
    return absl::IsUnavailable(s) ? 2 : 1;
  };
  proto::Stages list;
  list.set_action(proto::Stages::LIST);
  auto lists = target.StageStates(list);
  if (!lists.ok()) return fail(lists.status());
  const proto::StageStats* found = nullptr;
  for (const proto::HostStages& h : lists->hosts()) {
    for (const proto::StageStats& s : h.stages()) {
      if (s.config().name() == args.name &&
          s.config().kind() == "replica_set") {
        found = &s;
      }
    }
  }
  if (found == nullptr) {
    return fail(absl::NotFoundError("no replica set named " + args.name));
  }
  const proto::ReplicaSetOptions& o = found->config().replica_set();
  std::vector<std::string> members(o.member().begin(), o.member().end());
  std::string spec;
  const bool is_member =
      std::find(members.begin(), members.end(), args.file) != members.end();
  if (what == "add" || what == "rm") {
    if (what == "add" && is_member) {
      return fail(absl::AlreadyExistsError(args.file + " is a member of " +
                                           args.name + " already"));
    }
    if (what == "rm" && !is_member) {
      return fail(
          absl::NotFoundError(args.file + " is not a member of " + args.name));
    }
    if (what == "rm" && o.primary() == args.file) {
      return fail(absl::FailedPreconditionError(
          args.file + " is the primary of " + args.name +
          ": make another member primary first (replicas set-primary)"));
    }
    if (what == "add") members.push_back(args.file);
    std::erase(members, what == "rm" ? args.file : "");
    if (members.empty()) {
      return fail(absl::FailedPreconditionError(
          "a replica set keeps at least one member"));
    }
    for (const std::string& m : members) {
      spec += (spec.empty() ? "" : ",") + ("member=" + m);
    }
  } else if (what == "resolve") {
    if (!is_member) {
      return fail(
          absl::NotFoundError(args.file + " is not a member of " + args.name));
    }
    spec = "resolve=" + args.items.at(0) + "/" + args.file;
  } else if (what == "set-primary") {
    if (!is_member) {
      return fail(
          absl::NotFoundError(args.file + " is not a member of " + args.name));
    }
    spec = "primary=" + args.file;
  } else {
    spec = std::string("resync_paused=") + (what == "pause" ? "true" : "false");
  }
  proto::Stages req;
  req.set_action(proto::Stages::SET);
  req.mutable_stage()->set_name(args.name);
  req.set_spec(spec);
  req.set_timeout_ms(args.timeout_ms);
  auto after = target.StageStates(req);
  if (!after.ok()) return fail(after.status());
  std::cout << ReplicaSetsReport(*after, args.name, /*members=*/true,
                                 /*bars=*/false)
                   .text;
  return 0;
}

}  // namespace sroute::ctl

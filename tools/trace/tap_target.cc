// SPDX-License-Identifier: Apache-2.0
#include "tools/trace/tap_target.h"

#include <deque>
#include <map>
#include <set>
#include <utility>

#include "controller/client.h"
#include "rpc/handshake.h"
#include "rpc/rule_codec.h"
#include "rules/parser.h"
#include "tools/sroutectl/target.h"
#include "util/strings.h"

namespace sroute::trace {
namespace {

constexpr absl::Duration kTapCallTimeout = absl::Seconds(10);
constexpr uint32_t kTraceBatch = 4096;

std::string TapText(const std::string& tenant, const std::string& ops,
                    const std::string& file, double rate) {
  char r[32];
  std::snprintf(r, sizeof(r), "%g", rate);
  return StrCat("<", tenant, ", ", ops, ", ", file, "> -> trace(", r, ")");
}

// The op classes `ops` names (rule syntax: r, w, c, d joined by '|', '*').
OpClassMask Ops(const std::string& ops) {
  auto p = ParsePattern("<*, " + ops + ", *>");
  return p.ok() ? p->ops : kAllOpClasses;
}

// Reads every trace of `host` after *after (batch by batch).
absl::StatusOr<std::vector<proto::TraceRecord>> ReadTraces(
    const std::function<absl::StatusOr<proto::ControlResponse>(
        const proto::ControlRequest&)>& call,
    uint64_t* after, uint64_t* missed) {
  std::vector<proto::TraceRecord> out;
  for (;;) {
    proto::ControlRequest q;
    q.mutable_traces()->set_after(*after);
    q.mutable_traces()->set_limit(kTraceBatch);
    auto r = call(q);
    if (!r.ok()) return r.status();
    for (proto::TraceRecord& t : *r->mutable_traces()) {
      if (t.seq() > *after + 1) *missed += t.seq() - *after - 1;
      *after = t.seq();
      out.push_back(std::move(t));
    }
    if (r->traces_size() < static_cast<int>(kTraceBatch)) return out;
  }
}

// One host over its control port.
class HostTaps : public TapTarget {
 public:
  HostTaps(std::string host, std::string secret_file)
      : host_(std::move(host)), secret_file_(std::move(secret_file)) {}

  absl::StatusOr<std::vector<PathStep>> FindPath(
      const std::string& tenant, const std::string& ops,
      const std::string& file) override {
    (void)tenant;
    proto::ControlRequest list;
    list.mutable_list_rules();
    auto listing = Call(list);
    if (!listing.ok()) return listing.status();
    PathStep step{"", file, {}, true};
    for (const proto::RuleRecord& r : listing->rules()) {
      auto rule = ParseRule(r.text());
      if (!rule.ok() || rule->is_tap() || (rule->pattern.ops & Ops(ops)) == 0 ||
          !MayRouteFile(FormatPattern(rule->pattern), file)) {
        continue;
      }
      step.rules.push_back(StrCat("rule ", r.id(), ": ", r.text()));
    }
    return std::vector<PathStep>{std::move(step)};
  }

  absl::Status Install(const std::vector<PathStep>& path,
                       const std::string& tenant, const std::string& ops,
                       double rate, const std::string& owner,
                       absl::Duration lease) override {
    owner_ = owner;
    lease_ = lease;
    // Traces kept before the tap are not its.
    proto::ControlRequest q;
    q.mutable_traces()->set_after(UINT64_MAX - 1);
    auto before = Call(q);
    if (!before.ok()) return before.status();
    after_ = before->traces_sampled();
    proto::ControlRequest add;
    add.mutable_add_rules()->add_text(
        TapText(tenant, ops, path.at(0).file, rate));
    add.mutable_add_rules()->set_owner(owner);
    add.mutable_add_rules()->set_lease_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(lease)));
    auto added = Call(add);
    if (!added.ok()) return added.status();
    tap_id_ = added->ids(0);
    return absl::OkStatus();
  }

  absl::Status Renew() override { return Lease(lease_); }
  absl::Status Remove() override { return Lease(absl::ZeroDuration()); }

  absl::StatusOr<std::vector<proto::TraceRecord>> Collect(
      uint64_t* missed) override {
    auto all =
        ReadTraces([this](const proto::ControlRequest& q) { return Call(q); },
                   &after_, missed);
    if (!all.ok()) return all.status();
    std::vector<proto::TraceRecord> mine;
    for (proto::TraceRecord& t : *all) {
      if (t.rule_id() == tap_id_) mine.push_back(std::move(t));
    }
    return mine;
  }

  std::string Describe() const override { return host_; }

 private:
  absl::StatusOr<proto::ControlResponse> Call(const proto::ControlRequest& q) {
    return ctl::CallHost(host_, secret_file_, q, kTapCallTimeout);
  }
  absl::Status Lease(absl::Duration ttl) {
    proto::ControlRequest q;
    q.mutable_lease()->set_owner(owner_);
    q.mutable_lease()->set_ttl_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(ttl)));
    return Call(q).status();
  }

  const std::string host_, secret_file_;
  std::string owner_;
  absl::Duration lease_;
  uint64_t tap_id_ = 0;
  uint64_t after_ = 0;
};

// Every sSwitch on the path, through the controller.
class ControllerTaps : public TapTarget {
 public:
  ControllerTaps(std::string address, std::string secret_file,
                 std::string start)
      : address_(std::move(address)),
        secret_file_(std::move(secret_file)),
        start_(std::move(start)) {}

  absl::StatusOr<std::vector<PathStep>> FindPath(
      const std::string& tenant, const std::string& ops,
      const std::string& file) override {
    (void)tenant;
    if (absl::Status s = Connect(); !s.ok()) return s;
    auto hosts = client_->ListHosts();
    if (!hosts.ok()) return Classify(hosts.status());
    std::map<std::string, proto::HostInfo> by_name;
    std::map<std::string, std::string> by_address;  // a server's sSwitch
    for (const proto::HostStatus& h : hosts->hosts()) {
      by_name[h.host().sswitch()] = h.host();
      if (!h.host().address().empty()) {
        by_address[h.host().address()] = h.host().sswitch();
      }
    }
    std::deque<std::pair<std::string, std::string>> todo;  // sSwitch, file
    std::set<std::string> entries;
    if (!start_.empty()) {
      if (!by_name.contains(start_)) {
        return absl::NotFoundError(
            StrCat("no sSwitch named '", start_, "' at the controller"));
      }
      todo.emplace_back(start_, file);
      entries.insert(start_);
    } else {
      for (const auto& [name, info] : by_name) {
        if (info.role() == "fuse") {
          todo.emplace_back(name, file);
          entries.insert(name);
        }
      }
      if (todo.empty()) {
        return absl::NotFoundError(
            "no FUSE host is registered at the controller: name where the "
            "path starts with --host SSWITCH");
      }
    }
    std::vector<PathStep> path;
    std::set<std::pair<std::string, std::string>> seen;
    while (!todo.empty() && path.size() < 64) {
      auto [sswitch, f] = todo.front();
      todo.pop_front();
      if (!seen.insert({sswitch, f}).second) continue;
      auto rules = client_->Rules(sswitch);
      if (!rules.ok()) return Classify(rules.status());
      PathStep step{sswitch, f, {}, entries.contains(sswitch) && f == file};
      const proto::HostInfo& info = by_name[sswitch];
      for (const proto::ManagedRule& m : *rules) {
        auto rule = RuleOf(m);
        if (!rule.ok() || rule->is_tap() ||
            (rule->pattern.ops & Ops(ops)) == 0 ||
            !MayRouteFile(FormatPattern(rule->pattern), f)) {
          continue;
        }
        step.rules.push_back(StrCat("rule ", m.cid(), ": ", m.text()));
        for (const Detour& d : rule->detours) {
          if (d.what != Detour::What::kIo ||
              d.target.kind != Target::Kind::kFile) {
            continue;
          }
          const std::string to =
              f.find('*') == std::string::npos && f.rfind("re:", 0) != 0
                  ? ResolveTargetFile(d.target, rule->pattern.file, f)
                  : d.target.file;
          FileName name;
          if (!SplitFileName(to, &name)) continue;
          for (const proto::EndpointInfo& e : info.endpoints()) {
            if (e.name() != name.host || e.kind() != "server") continue;
            auto next = by_address.find(e.address());
            if (next == by_address.end()) continue;  // not registered
            todo.emplace_back(next->second,
                              JoinFileName(next->second, name.path));
          }
        }
      }
      path.push_back(std::move(step));
    }
    return path;
  }

  absl::Status Install(const std::vector<PathStep>& path,
                       const std::string& tenant, const std::string& ops,
                       double rate, const std::string& owner,
                       absl::Duration lease) override {
    if (absl::Status s = Connect(); !s.ok()) return s;
    owner_ = owner;
    lease_ = lease;
    UpdateSpec spec;
    spec.owner = owner;
    spec.lease = lease;
    for (const PathStep& step : path) on_path_.insert(step.sswitch);
    for (const PathStep& step : path) {
      if (!step.entry) continue;
      spec.changes.push_back(RuleChanges{
          step.sswitch, {TapText(tenant, ops, step.file, rate)}, {}});
      // Traces kept before the taps are not theirs.
      proto::ControlRequest q;
      q.mutable_traces()->set_after(UINT64_MAX - 1);
      auto before = client_->ControlAt(step.sswitch, q);
      if (!before.ok()) return Classify(before.status());
      after_[step.sswitch] = before->traces_sampled();
    }
    auto outcome = client_->Update(spec);
    if (!outcome.ok()) return Classify(outcome.status());
    return absl::OkStatus();
  }

  absl::Status Renew() override {
    return Classify(client_->RenewLease(owner_, lease_).status());
  }
  absl::Status Remove() override {
    return Classify(client_->RenewLease(owner_, absl::ZeroDuration()).status());
  }

  absl::StatusOr<std::vector<proto::TraceRecord>> Collect(
      uint64_t* missed) override {
    std::vector<proto::TraceRecord> mine;
    for (auto& [tapped, after] : after_) {
      const std::string& sswitch = tapped;  // a lambda may not take a binding
      auto all = ReadTraces(
          [&](const proto::ControlRequest& q) {
            return client_->ControlAt(sswitch, q);
          },
          &after, missed);
      if (!all.ok()) return Classify(all.status());
      for (proto::TraceRecord& t : *all) {
        if (absl::Status s = LearnIds(sswitch); !s.ok()) return s;
        if (ids_[sswitch].tap != t.rule_id()) continue;
        // Rule ids as the controller's cids, hop by hop (hosts on the path).
        t.set_rule_id(Cid(sswitch, t.rule_id()));
        for (proto::TraceHop& h : *t.mutable_hops()) {
          if (h.rule_id() == 0 || !on_path_.contains(h.host())) continue;
          if (absl::Status s = LearnIds(h.host()); !s.ok()) return s;
          h.set_rule_id(Cid(h.host(), h.rule_id()));
        }
        mine.push_back(std::move(t));
      }
    }
    return mine;
  }

  std::string Describe() const override { return "controller " + address_; }

 private:
  struct Ids {
    bool known = false;
    uint64_t tap = 0;                   // the host's id of our tap
    std::map<uint64_t, uint64_t> cids;  // the host's id -> cid
  };

  // The host's rule ids of `sswitch` against the controller's cids, by
  // rule text and owner (learnt once).
  absl::Status LearnIds(const std::string& sswitch) {
    Ids& ids = ids_[sswitch];
    if (ids.known) return absl::OkStatus();
    proto::ControlRequest q;
    q.mutable_stats();
    auto stats = client_->ControlAt(sswitch, q);
    if (!stats.ok()) return Classify(stats.status());
    auto managed = client_->Rules(sswitch);
    if (!managed.ok()) return Classify(managed.status());
    std::map<std::pair<std::string, std::string>, uint64_t> cid_of;
    for (const proto::ManagedRule& m : *managed) {
      auto r = RuleOf(m);
      cid_of[{r.ok() ? FormatRule(*r) : m.text(), m.owner()}] = m.cid();
    }
    for (const proto::RuleRecord& r : stats->rules()) {
      auto it = cid_of.find({r.text(), r.owner()});
      if (it != cid_of.end()) ids.cids[r.id()] = it->second;
      if (r.owner() == owner_) ids.tap = r.id();
    }
    ids.known = true;
    return absl::OkStatus();
  }
  uint64_t Cid(const std::string& sswitch, uint64_t id) {
    const auto& cids = ids_[sswitch].cids;
    auto it = cids.find(id);
    return it == cids.end() ? id : it->second;
  }

  absl::Status Connect() {
    if (client_ != nullptr) return absl::OkStatus();
    auto c = ctl::ConnectController(address_, secret_file_, "sroute-trace");
    if (!c.ok()) return c.status();
    client_ = *std::move(c);
    return absl::OkStatus();
  }
  absl::Status Classify(const absl::Status& s) const {
    return ctl::ClassifyControllerError(s, address_);
  }

  const std::string address_, secret_file_, start_;
  std::unique_ptr<ControllerClient> client_;
  std::string owner_;
  absl::Duration lease_;
  std::map<std::string, uint64_t> after_;  // by tapped sSwitch
  std::set<std::string> on_path_;
  std::map<std::string, Ids> ids_;
};

}  // namespace

bool MayRouteFile(const std::string& rule_pattern, const std::string& file) {
  auto p = ParsePattern(rule_pattern);
  if (!p.ok()) return false;
  const FilePattern& f = p->file;
  const bool exact =
      file.find('*') == std::string::npos && file.rfind("re:", 0) != 0;
  switch (f.kind) {
    case FilePattern::Kind::kAny:
    case FilePattern::Kind::kRegex:
      return true;
    case FilePattern::Kind::kExact:
      return exact ? f.text == file : true;
    case FilePattern::Kind::kPrefix:
      return exact ? file.rfind(f.text, 0) == 0 : true;
  }
  return false;
}

std::unique_ptr<TapTarget> MakeHostTaps(std::string host,
                                        std::string secret_file) {
  return std::make_unique<HostTaps>(std::move(host), std::move(secret_file));
}

std::unique_ptr<TapTarget> MakeControllerTaps(std::string address,
                                              std::string secret_file,
                                              std::string start) {
  return std::make_unique<ControllerTaps>(
      std::move(address), std::move(secret_file), std::move(start));
}

}  // namespace sroute::trace

// SPDX-License-Identifier: Apache-2.0
#include "controller/apps/cache_sizing.h"

#include <algorithm>
#include <set>

#include "stages/cache/shards_delegate.h"
#include "util/log.h"
#include "util/strings.h"

namespace sroute {
namespace {

absl::StatusOr<uint64_t> ParseBytes(std::string_view key, std::string_view v) {
  uint64_t n = 0;
  if (!ParseByteSize(v, &n)) {
    return absl::InvalidArgumentError(
        StrCat("cache_sizing: ", key,
               ": expected a size (with K, M, G or T), not '", v, "'"));
  }
  return n;
}

}  // namespace

absl::StatusOr<CacheSizingOptions> ParseCacheSizingArgs(
    const std::string& args) {
  CacheSizingOptions o;
  for (std::string_view kv : StrSplit(args, ',')) {
    if (kv.empty()) continue;
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return absl::InvalidArgumentError(
          StrCat("cache_sizing: expected key=value, not '", kv, "'"));
    }
    const std::string_view key = kv.substr(0, eq);
    const std::string value(kv.substr(eq + 1));
    if (key == "sswitch") {
      o.sswitch = value;
    } else if (key == "stage") {
      o.stage = value;
    } else if (key == "budget") {
      auto b = ParseBytes(key, value);
      if (!b.ok()) return b.status();
      o.budget_bytes = *b;
    } else if (key == "tenants") {
      for (std::string_view t : StrSplit(value, '+')) {
        if (!t.empty()) o.tenants.emplace_back(t);
      }
    } else if (key == "files") {
      o.files = value;
    } else if (key == "rate") {
      char* end = nullptr;
      o.rate = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(o.rate > 0) || o.rate > 1) {
        return absl::InvalidArgumentError(
            "cache_sizing: rate: a number in (0, 1]");
      }
    } else if (key == "max_keys") {
      auto n = ParseBytes(key, value);
      if (!n.ok()) return n.status();
      o.max_keys = *n;
    } else if (key == "block") {
      auto b = ParseBytes(key, value);
      if (!b.ok()) return b.status();
      o.block = *b;
    } else if (key == "step") {
      auto b = ParseBytes(key, value);
      if (!b.ok()) return b.status();
      o.step_bytes = *b;
    } else if (key == "interval") {
      auto s = ParseBytes(key, value);
      if (!s.ok() || *s == 0) {
        return absl::InvalidArgumentError(
            "cache_sizing: interval: seconds, at least 1");
      }
      o.interval = absl::Seconds(static_cast<int64_t>(*s));
    } else {
      return absl::InvalidArgumentError(StrCat(
          "cache_sizing: unknown argument '", key,
          "' (sswitch, stage, budget, tenants, files, rate, max_keys, block, "
          "step, interval)"));
    }
  }
  if (o.sswitch.empty() || o.budget_bytes == 0 || o.tenants.empty()) {
    return absl::InvalidArgumentError(
        "cache_sizing: needs sswitch=, budget= and tenants=");
  }
  if (o.block < 512 || (o.block & (o.block - 1)) != 0) {
    return absl::InvalidArgumentError("cache_sizing: block: a power of two");
  }
  if (o.budget_bytes < o.block) {
    return absl::InvalidArgumentError(
        "cache_sizing: budget is smaller than a block");
  }
  return o;
}

CacheSizer::CacheSizer(CacheSizingOptions options)
    : options_(std::move(options)) {
  MutexLock l(&mu_);
  for (const std::string& t : options_.tenants) {
    Tenant& tenant = tenants_[t];
    MrcOptions mo;
    mo.bucket_blocks = step_blocks();
    mo.max_blocks = budget_blocks();
    tenant.builder = std::make_unique<MrcBuilder>(mo);
  }
}

uint64_t CacheSizer::step_blocks() const {
  const uint64_t step = options_.step_bytes != 0
                            ? options_.step_bytes / options_.block
                            : budget_blocks() / 64;
  return std::max<uint64_t>(step, 1);
}

void CacheSizer::AddSample(const std::string& tenant, double rate,
                           uint64_t refs, const std::vector<uint64_t>& keys) {
  MutexLock l(&mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return;
  Tenant& t = it->second;
  t.refs = std::max(t.refs, refs);
  if (options_.max_keys != 0 && t.sampler == nullptr) {
    // Fixed size over what the hosts sampled at `rate`: starts there.
    auto s =
        ShardsSampler::Create({.rate = rate, .max_keys = options_.max_keys});
    if (s.ok()) t.sampler = *std::move(s);
  }
  for (uint64_t key : keys) {
    if (t.sampler == nullptr) {
      t.builder->Add(key, rate);
      continue;
    }
    if (!t.sampler->Sample(key)) continue;
    t.builder->Add(key, std::min(rate, t.sampler->rate()));
    for (uint64_t gone : t.sampler->Admit(key)) t.builder->Remove(gone);
  }
}

std::map<std::string, TenantCurve> CacheSizer::Curves() const {
  MutexLock l(&mu_);
  std::map<std::string, TenantCurve> out;
  for (const auto& [name, t] : tenants_) {
    TenantCurve c;
    c.mrc = t.builder->Build(t.refs);
    c.references = t.refs;
    out[name] = std::move(c);
  }
  return out;
}

std::map<std::string, uint64_t> CacheSizer::Split(double* expected_hits) const {
  const std::map<std::string, TenantCurve> curves = Curves();
  std::vector<TenantCurve> list;
  for (const auto& [name, c] : curves) list.push_back(c);
  const std::vector<uint64_t> blocks =
      AllocateBudget(list, budget_blocks(), step_blocks());
  if (expected_hits != nullptr) *expected_hits = TotalHits(list, blocks);
  std::map<std::string, uint64_t> out;
  size_t i = 0;
  for (const auto& [name, c] : curves) out[name] = blocks[i++] * options_.block;
  return out;
}

std::string FormatCurve(const std::string& tenant, const TenantCurve& curve,
                        uint64_t block) {
  std::string out =
      StrCat("# tenant ", tenant, " references ",
             static_cast<uint64_t>(curve.references), " block ", block, "\n");
  for (const MrcPoint& p : curve.mrc.points) {
    StrAppend(&out, p.size_blocks * block, " ", p.miss_ratio, "\n");
  }
  return out;
}

namespace {

class CacheSizingApp : public ControlApp {
 public:
  explicit CacheSizingApp(CacheSizingOptions o) : sizer_(std::move(o)) {}

  absl::Status Start(ControllerApi& api) override {
    api_ = &api;
    const CacheSizingOptions& o = sizer_.options();
    if (absl::Status s = api.WaitForHost(o.sswitch, absl::Seconds(60));
        !s.ok()) {
      return s;
    }
    if (absl::Status s = EnsureStage(); !s.ok()) return s;
    if (absl::Status s = InstallRoutes(); !s.ok()) return s;
    // Until the first curves, an equal split.
    std::map<std::string, uint64_t> equal;
    const uint64_t each = o.budget_bytes / o.tenants.size() / o.block * o.block;
    for (const std::string& t : o.tenants) equal[t] = each;
    if (absl::Status s = Resize(equal); !s.ok()) return s;
    api.AddTimer(o.interval, [this] { Round(); });
    return absl::OkStatus();
  }

  void OnHeader(const HeaderEvent& e) override {
    if (!e.value || e.sswitch != sizer_.options().sswitch ||
        !e.value->starts_with("shards ")) {
      return;
    }
    auto sample = ParseShardsSample(*e.value);
    if (!sample.ok()) return;
    sizer_.AddSample(e.header.source, sample->rate, sample->refs, sample->keys);
  }

 private:
  absl::Status EnsureStage() {
    const CacheSizingOptions& o = sizer_.options();
    proto::Stages list;
    list.set_action(proto::Stages::LIST);
    auto stages = api_->Stages(o.sswitch, list);
    if (!stages.ok()) return stages.status();
    for (const proto::StageStats& s : *stages) {
      if (s.config().name() == o.stage) {
        if (s.config().kind() != "cache") {
          return absl::FailedPreconditionError(
              StrCat("cache_sizing: stage ", o.stage, " on ", o.sswitch,
                     " is a ", s.config().kind(), ", not a cache"));
        }
        return absl::OkStatus();
      }
    }
    proto::Stages add;
    add.set_action(proto::Stages::ADD);
    add.set_spec(StrCat(o.stage,
                        "=cache:partition_by=tenant,partition_bytes=0,",
                        "block_size=", o.block));
    return api_->Stages(o.sswitch, add).status();
  }

  absl::Status InstallRoutes() {
    const CacheSizingOptions& o = sizer_.options();
    auto existing = api_->Rules(o.sswitch);
    if (!existing.ok()) return existing.status();
    std::set<std::string> have;
    for (const proto::ManagedRule& r : *existing) have.insert(r.text());
    RuleChanges changes{o.sswitch, {}, {}};
    for (const std::string& t : o.tenants) {
      const std::string rule =
          StrCat("<", t, ", r|w, ", o.files, "> -> shards(rate=", o.rate,
                 ", block=", o.block, "); <IO, stage:", o.stage, ">");
      if (!have.contains(rule)) changes.insert.push_back(rule);
    }
    if (changes.insert.empty()) return absl::OkStatus();
    UpdateSpec spec;
    spec.changes.push_back(std::move(changes));
    return api_->Update(spec).status();
  }

  absl::Status Resize(const std::map<std::string, uint64_t>& split) {
    std::string spec;
    for (const auto& [tenant, bytes] : split) {
      StrAppend(&spec, spec.empty() ? "" : ",", "partition=", tenant, "/",
                bytes);
    }
    proto::Stages set;
    set.set_action(proto::Stages::SET);
    set.mutable_stage()->set_name(sizer_.options().stage);
    set.set_spec(spec);
    return api_->Stages(sizer_.options().sswitch, set).status();
  }

  void Round() {
    double hits = 0;
    const std::map<std::string, uint64_t> split = sizer_.Split(&hits);
    std::string tenants;
    for (const auto& [tenant, curve] : sizer_.Curves()) {
      (void)api_->PutState(StrCat("mrc/", tenant),
                           FormatCurve(tenant, curve, sizer_.options().block));
      StrAppend(&tenants, tenants.empty() ? "" : "\n", tenant);
    }
    (void)api_->PutState("tenants", tenants);
    if (split == last_) return;
    if (absl::Status s = Resize(split); !s.ok()) {
      LogWarning("cache_sizing: resizing ", sizer_.options().stage, " on ",
                 sizer_.options().sswitch, ": ", s.message());
      return;
    }
    std::string text;
    for (const auto& [tenant, bytes] : split) {
      StrAppend(&text, " ", tenant, "=", bytes);
    }
    LogInfo("cache_sizing: partitions", text, " (expected hits ",
            static_cast<uint64_t>(hits), ")");
    last_ = split;
  }

  CacheSizer sizer_;
  ControllerApi* api_ = nullptr;
  std::map<std::string, uint64_t> last_;
};

ControlAppRegistration cache_sizing_app(
    "cache_sizing",
    [](const std::string& args) -> absl::StatusOr<std::unique_ptr<ControlApp>> {
      auto o = ParseCacheSizingArgs(args);
      if (!o.ok()) return o.status();
      return std::make_unique<CacheSizingApp>(*std::move(o));
    });

}  // namespace
}  // namespace sroute

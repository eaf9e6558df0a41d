// SPDX-License-Identifier: Apache-2.0
#include "stages/stage.h"

#include <map>

#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

void RegisterBuiltinStages(StageRegistry& registry);  // builtin.cc

namespace {

bool IsStageNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

}  // namespace

absl::Status CheckStageName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("a stage needs a name");
  for (char c : name) {
    if (!IsStageNameChar(c)) {
      return absl::InvalidArgumentError(
          StrCat("stage name '", name,
                 "': use letters, digits, '_', '.' and '-' (rules name it "
                 "as stage:NAME)"));
    }
  }
  return absl::OkStatus();
}

struct StageRegistry::Impl {
  // A leaf; factories run after it is released.
  mutable Mutex mu;
  std::map<std::string, StageFactory> factories ABSL_GUARDED_BY(mu);
};

StageRegistry::StageRegistry() : impl_(std::make_unique<Impl>()) {}

StageRegistry& StageRegistry::Global() {
  static StageRegistry* registry = [] {
    auto* r = new StageRegistry();
    RegisterBuiltinStages(*r);
    return r;
  }();
  return *registry;
}

absl::Status StageRegistry::Register(const std::string& kind,
                                     StageFactory factory) {
  MutexLock l(&impl_->mu);
  if (!impl_->factories.emplace(kind, std::move(factory)).second) {
    return absl::AlreadyExistsError(
        StrCat("a stage kind named '", kind, "' is registered already"));
  }
  return absl::OkStatus();
}

std::vector<std::string> StageRegistry::Kinds() const {
  MutexLock l(&impl_->mu);
  std::vector<std::string> out;
  for (const auto& [kind, f] : impl_->factories) out.push_back(kind);
  return out;
}

absl::StatusOr<std::shared_ptr<HostStage>> StageRegistry::Create(
    const proto::StageConfig& config, const StageEnv& env) const {
  if (absl::Status s = CheckStageName(config.name()); !s.ok()) return s;
  StageFactory factory;
  {
    MutexLock l(&impl_->mu);
    auto it = impl_->factories.find(config.kind());
    if (it == impl_->factories.end()) {
      std::string known;
      for (const auto& [kind, f] : impl_->factories) {
        StrAppend(&known, known.empty() ? "" : ", ", kind);
      }
      return absl::InvalidArgumentError(StrCat(
          "stage ", config.name(), ": ",
          config.kind().empty() ? "no kind given"
                                : StrCat("unknown kind '", config.kind(), "'"),
          " (kinds: ", known, ")"));
    }
    factory = it->second;
  }
  // The options, if any, must be the kind's own.
  const auto* oneof =
      proto::StageConfig::descriptor()->FindOneofByName("options");
  if (const auto* set =
          proto::StageConfig::GetReflection()->GetOneofFieldDescriptor(config,
                                                                       oneof);
      set != nullptr && set->name() != config.kind()) {
    return absl::InvalidArgumentError(
        StrCat("stage ", config.name(), ": options '", set->name(),
               "' given for a stage of kind '", config.kind(), "'"));
  }
  auto stage = factory(config, env);
  if (!stage.ok()) {
    return absl::Status(stage.status().code(),
                        StrCat("stage ", config.name(), " (", config.kind(),
                               "): ", stage.status().message()));
  }
  return stage;
}

}  // namespace sroute

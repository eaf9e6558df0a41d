// SPDX-License-Identifier: Apache-2.0
#include "sswitch/delegate.h"

#include <algorithm>
#include <map>

#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

void RegisterBuiltinDelegates(
    DelegateRegistry& registry);  // builtin_delegates.cc

absl::StatusOr<uint64_t> DelegateContext::Insert(Rule rule) {
  std::vector<Rule> one;
  one.push_back(std::move(rule));
  auto ids = Update(std::move(one), {});
  if (!ids.ok()) return ids.status();
  return (*ids)[0];
}

absl::Status DelegateContext::Delete(uint64_t id) {
  return Update({}, {id}).status();
}

struct DelegateRegistry::Impl {
  // Guards factories. A leaf (taken under SSwitch::control_mu_); factories
  // run after it is released.
  mutable Mutex mu;
  std::map<std::string, DelegateFactory> factories ABSL_GUARDED_BY(mu);
};

DelegateRegistry::DelegateRegistry() : impl_(std::make_unique<Impl>()) {}

DelegateRegistry& DelegateRegistry::Global() {
  static DelegateRegistry* registry = [] {
    auto* r = new DelegateRegistry();
    RegisterBuiltinDelegates(*r);
    return r;
  }();
  return *registry;
}

absl::Status DelegateRegistry::Register(const std::string& name,
                                        DelegateFactory factory) {
  MutexLock l(&impl_->mu);
  if (!impl_->factories.emplace(name, std::move(factory)).second) {
    return absl::AlreadyExistsError(
        StrCat("a delegate named '", name, "' is registered already"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Delegate>> DelegateRegistry::Create(
    const DelegateSpec& spec, const Rule& rule) const {
  DelegateFactory factory;
  {
    MutexLock l(&impl_->mu);
    auto it = impl_->factories.find(spec.name);
    if (it == impl_->factories.end()) {
      std::string known;
      for (const auto& [name, f] : impl_->factories) {
        StrAppend(&known, known.empty() ? "" : ", ", name);
      }
      return absl::NotFoundError(
          StrCat("unknown delegate '", spec.name, "' (known: ", known, ")"));
    }
    factory = it->second;
  }
  auto d = factory(spec, rule);
  if (!d.ok()) {
    return absl::Status(d.status().code(),
                        StrCat(spec.name, "(): ", d.status().message()));
  }
  return d;
}

std::vector<std::string> DelegateRegistry::Names() const {
  MutexLock l(&impl_->mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : impl_->factories) names.push_back(name);
  return names;
}

}  // namespace sroute

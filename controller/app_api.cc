// SPDX-License-Identifier: Apache-2.0
#include "controller/app_api.h"

#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <thread>

#include "rules/parser.h"
#include "rules/validate.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {

std::string RuleToInsert::Text() const {
  return rule ? FormatRule(*rule) : text;
}

absl::StatusOr<Rule> RuleToInsert::Read() const {
  if (!rule) return ParseRule(text);
  if (absl::Status s = ValidateRule(*rule); !s.ok()) return s;
  return *rule;
}

absl::StatusOr<uint64_t> ControllerApi::Insert(const std::string& sswitch,
                                               const std::string& rule) {
  UpdateSpec spec;
  spec.changes.push_back(RuleChanges{sswitch, {rule}, {}});
  auto r = Update(spec);
  if (!r.ok()) return r.status();
  return r->cids.at(0);
}

absl::Status ControllerApi::WaitForHost(const std::string& sswitch,
                                        absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    for (const TopologyHost& h : Topology()) {
      if (h.info.sswitch() == sswitch && h.connected) return absl::OkStatus();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(StrCat("host ", sswitch,
                                                " did not connect within ",
                                                absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

absl::Status ControllerApi::Delete(const std::string& sswitch, uint64_t cid) {
  UpdateSpec spec;
  spec.changes.push_back(RuleChanges{sswitch, {}, {cid}});
  return Update(spec).status();
}

absl::StatusOr<proto::AppAnswer> ControlApp::OnCall(
    const proto::AppCall& call) {
  return absl::UnimplementedError(
      StrCat("app ", call.app(), " takes no requests"));
}

struct ControlAppRegistry::Impl {
  // Guards factories. A leaf: factories run without it.
  mutable Mutex mu;
  std::map<std::string, ControlAppFactory> factories ABSL_GUARDED_BY(mu);
};

ControlAppRegistry& ControlAppRegistry::Global() {
  static ControlAppRegistry* r = [] {
    auto* reg = new ControlAppRegistry();
    reg->impl_ = std::make_shared<Impl>();
    return reg;
  }();
  return *r;
}

absl::Status ControlAppRegistry::Register(const std::string& name,
                                          ControlAppFactory factory) {
  if (name.empty() || name.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(StrCat("bad app name '", name, "'"));
  }
  MutexLock l(&impl_->mu);
  if (!impl_->factories.emplace(name, std::move(factory)).second) {
    return absl::AlreadyExistsError(
        StrCat("a control app named '", name, "' is registered already"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ControlApp>> ControlAppRegistry::Create(
    const std::string& spec, std::string* name) const {
  const size_t colon = spec.find(':');
  *name = spec.substr(0, colon);
  const std::string args =
      colon == std::string::npos ? "" : spec.substr(colon + 1);
  ControlAppFactory factory;
  {
    MutexLock l(&impl_->mu);
    auto it = impl_->factories.find(*name);
    if (it == impl_->factories.end()) {
      std::string known;
      for (const auto& [n, f] : impl_->factories) {
        StrAppend(&known, known.empty() ? "" : ", ", n);
      }
      return absl::NotFoundError(
          StrCat("no control app named '", *name,
                 "' (known: ", known.empty() ? "none" : known, ")"));
    }
    factory = it->second;
  }
  auto app = factory(args);
  if (!app.ok()) {
    return absl::Status(app.status().code(),
                        StrCat("app ", *name, ": ", app.status().message()));
  }
  return app;
}

std::vector<std::string> ControlAppRegistry::Names() const {
  MutexLock l(&impl_->mu);
  std::vector<std::string> out;
  for (const auto& [n, f] : impl_->factories) out.push_back(n);
  return out;
}

absl::Status LoadControlAppPlugin(const std::string& path) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::NotFoundError(
        StrCat("cannot load plug-in ", path, ": ", dlerror()));
  }
  using RegisterFn = void (*)(ControlAppRegistry*);
  auto fn = reinterpret_cast<RegisterFn>(dlsym(lib, "sroute_register_apps"));
  if (fn == nullptr) {
    dlclose(lib);
    return absl::InvalidArgumentError(
        StrCat("plug-in ", path,
               " does not export sroute_register_apps (extern \"C\")"));
  }
  // The library stays loaded: its apps run until the controller stops.
  fn(&ControlAppRegistry::Global());
  return absl::OkStatus();
}

ControlAppRegistration::ControlAppRegistration(const char* name,
                                               ControlAppFactory factory) {
  (void)ControlAppRegistry::Global().Register(name, std::move(factory));
}

std::vector<EndpointWear> WearOf(const std::map<std::string, int64_t>& gauges) {
  std::map<std::string, EndpointWear> by_name;
  for (const auto& [key, value] : gauges) {
    if (!key.starts_with("flash.")) continue;
    const size_t dot = key.rfind('.');
    if (dot <= 6) continue;
    const std::string name = key.substr(6, dot - 6);
    const std::string_view what = std::string_view(key).substr(dot + 1);
    if (what == "erase_mean_milli") {
      by_name[name].name = name;
      by_name[name].erase_mean = static_cast<double>(value) / 1000;
    } else if (what == "erases") {
      by_name[name].name = name;
      by_name[name].erases = static_cast<uint64_t>(std::max<int64_t>(value, 0));
    }
  }
  std::vector<EndpointWear> out;
  for (auto& [name, w] : by_name) out.push_back(std::move(w));
  return out;
}

std::string EndpointOf(const std::string& file) {
  if (!file.starts_with("//")) return "";
  const size_t slash = file.find('/', 2);
  return file.substr(
      2, slash == std::string::npos ? std::string::npos : slash - 2);
}

double WearVariance(const std::vector<EndpointWear>& wear) {
  if (wear.size() < 2) return 0;
  double mean = 0;
  for (const EndpointWear& w : wear) mean += w.erase_mean;
  mean /= static_cast<double>(wear.size());
  double var = 0;
  for (const EndpointWear& w : wear) {
    var += (w.erase_mean - mean) * (w.erase_mean - mean);
  }
  return var / static_cast<double>(wear.size());
}

}  // namespace sroute

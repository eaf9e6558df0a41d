// SPDX-License-Identifier: Apache-2.0
#include "tools/sroutectl/profile.h"

#include <unistd.h>

#include <fstream>
#include <iostream>

#include "absl/time/time.h"
#include "endpoints/flash_profile.h"
#include "google/protobuf/text_format.h"
#include "stages/steering/profile.h"
#include "tools/sroutectl/format.h"
#include "tools/sroutectl/json_output.h"
#include "util/strings.h"

namespace sroute::ctl {
namespace {

int ProfileFail(const absl::Status& s) {
  std::cerr << "sroutectl: " << s.message() << "\n";
  return absl::IsUnavailable(s) ? 2 : 1;
}

absl::Status SaveProfile(const proto::DeviceProfile& p,
                         const std::string& path) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(p, &text);
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::StatusOr<proto::DeviceProfile> LoadProfile(const std::string& path) {
  std::string text;
  if (!ReadInput(path, &text)) {
    return absl::InvalidArgumentError(StrCat("cannot read ", path));
  }
  proto::DeviceProfile p;
  if (!google::protobuf::TextFormat::ParseFromString(text, &p)) {
    return absl::InvalidArgumentError(
        StrCat(path, " is not a DeviceProfile in protobuf text format"));
  }
  if (auto made = Profile::Make(p); !made.ok()) {
    return absl::InvalidArgumentError(
        StrCat(path, ": ", made.status().message()));
  }
  return p;
}

// Prints the profile (text or JSON) and saves it if asked.
int PrintProfile(const Args& a, const proto::DeviceProfile& p) {
  if (!a.profile.save.empty()) {
    if (absl::Status s = SaveProfile(p, a.profile.save); !s.ok())
      return ProfileFail(s);
  }
  std::cout << (a.json ? ToJson(p) : ProfileText(p));
  return 0;
}

int ShowProfiles(
    const Args& a,
    const absl::StatusOr<std::vector<proto::DeviceProfile>>& list) {
  if (!list.ok()) return ProfileFail(list.status());
  if (a.json) {
    proto::SetProfiles all;  // its `profile` field: the list
    for (const auto& p : *list) *all.add_profile() = p;
    std::cout << ToJson(all);
    return 0;
  }
  if (list->empty()) std::cout << "no endpoint is watched\n";
  for (const auto& p : *list) std::cout << ProfileText(p);
  return 0;
}

}  // namespace

std::string ProfileText(const proto::DeviceProfile& p) {
  std::string out = StrCat("profile of ", p.endpoint());
  if (!p.how().empty()) StrAppend(&out, " (", p.how(), ")");
  if (p.measured_unix_s() != 0) {
    StrAppend(&out, ", measured ",
              absl::FormatTime("%Y-%m-%d %H:%M:%S",
                               absl::FromUnixSeconds(p.measured_unix_s()),
                               absl::LocalTimeZone()));
  }
  out += "\n";
  auto profile = Profile::Make(p);
  if (!profile.ok())
    return out + std::string(profile.status().message()) + "\n";
  const double targets_us[] = {500, 1000, 2000, 5000, 10000, 50000};
  std::vector<std::vector<std::string>> rows = {{"WRITES", "PEAK_IOPS",
                                                 "P90<=0.5ms", "<=1ms", "<=2ms",
                                                 "<=5ms", "<=10ms", "<=50ms"}};
  for (const auto& mix : p.mix()) {
    std::vector<std::string> row = {
        StrCat(mix.write_percent(), "%"),
        StrCat(static_cast<int64_t>(mix.peak_iops()))};
    for (double t : targets_us) {
      row.push_back(StrCat(static_cast<int64_t>(profile->Capacity(
          mix.write_percent() / 100.0, t, Percentile::kP90))));
    }
    rows.push_back(std::move(row));
  }
  return out + Table(rows);
}

int ProfileMeasure(const Args& a, ControlTarget& target) {
  proto::ProfileEndpoint req;
  req.set_endpoint(a.name);
  for (uint32_t w : a.profile.write_percents) req.add_write_percent(w);
  req.set_step_percent(a.profile.step_percent);
  req.set_step_ms(a.profile.step_ms);
  req.set_warmup_ms(a.profile.warmup_ms);
  req.set_depth(a.profile.depth);
  req.set_size_bytes(uint64_t{a.profile.size_mib} << 20);
  uint64_t foreign = 0;
  for (;;) {
    auto step = target.ProfileStep(req);
    if (!step.ok()) return ProfileFail(step.status());
    foreign += step->foreign_ios();
    std::cerr << "profile " << a.name << ": " << step->steps_done() << "/"
              << step->steps_total() << " steps\n";
    if (step->done()) {
      if (foreign > 0) {
        std::cerr << "sroutectl: " << foreign
                  << " IOs of others reached the endpoint during the sweep "
                     "(steps they disturbed ran again): measure at idle\n";
      }
      proto::DeviceProfile p = step->profile();
      if (a.profile.watch) {
        proto::SetProfiles set;
        *set.add_profile() = p;
        set.set_threshold_percent(a.profile.threshold_percent);
        if (auto r = target.SetProfiles(set); !r.ok())
          return ProfileFail(r.status());
      }
      return PrintProfile(a, p);
    }
    *req.mutable_so_far() = step->profile();
  }
}

int ProfileOfModel(const Args& a) {
  auto options = FlashModel::Preset(a.name);
  if (!options.ok()) return ProfileFail(options.status());
  ModelSweep sweep;
  if (!a.profile.write_percents.empty()) {
    sweep.write_percents = a.profile.write_percents;
  }
  if (a.profile.step_percent != 0) sweep.step_percent = a.profile.step_percent;
  for (size_t i = 0; i < sweep.write_percents.size(); ++i) {
    if (sweep.write_percents[i] > 100 ||
        (i > 0 && sweep.write_percents[i] <= sweep.write_percents[i - 1])) {
      return ProfileFail(absl::InvalidArgumentError(
          "--mixes must rise strictly within 0..100"));
    }
  }
  if (sweep.step_percent > 100) {
    return ProfileFail(absl::InvalidArgumentError("--step-percent is 1..100"));
  }
  proto::DeviceProfile p =
      DilateProfile(ProfileModel(*options, sweep), a.profile.dilation);
  p.set_endpoint(a.name);
  return PrintProfile(a, p);
}

int ProfileSet(const Args& a, ControlTarget& target) {
  auto p = LoadProfile(a.file);
  if (!p.ok()) return ProfileFail(p.status());
  p->set_endpoint(a.name);
  proto::SetProfiles set;
  *set.add_profile() = *p;
  set.set_threshold_percent(a.profile.threshold_percent);
  set.set_window_ms(a.profile.window_ms);
  set.set_max_baseline_percent(a.profile.max_baseline_percent);
  return ShowProfiles(a, target.SetProfiles(set));
}

int ProfileClear(const Args& a, ControlTarget& target) {
  proto::SetProfiles set;
  set.add_clear(a.name);
  return ShowProfiles(a, target.SetProfiles(set));
}

int ProfileStore(const Args& a, ControlTarget& target) {
  auto p = LoadProfile(a.file);
  if (!p.ok()) return ProfileFail(p.status());
  std::string text;
  google::protobuf::TextFormat::PrintToString(*p, &text);
  auto r = target.CallApp(
      "steering", "profile-put",
      {a.name, a.sswitch, a.spec.empty() ? a.name : a.spec, text});
  if (!r.ok()) return ProfileFail(r.status());
  std::cout << r->text;
  return 0;
}

int ProfileList(const Args& a, ControlTarget& target) {
  return ShowProfiles(a, target.SetProfiles(proto::SetProfiles()));
}

}  // namespace sroute::ctl

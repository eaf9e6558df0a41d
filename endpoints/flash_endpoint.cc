// SPDX-License-Identifier: Apache-2.0
#include "endpoints/flash_endpoint.h"

#include <fcntl.h>
#include <stdio.h>  // RENAME_EXCHANGE
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/numbers.h"
#include "endpoints/local_endpoint.h"
#include "util/clock.h"
#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {

namespace {
constexpr uint32_t kNoPage = UINT32_MAX;
}  // namespace

absl::StatusOr<FlashEndpointSpec> ParseFlashSpec(std::string_view spec) {
  FlashEndpointSpec out;
  const std::vector<std::string_view> parts = StrSplit(spec, ',');
  if (parts.empty() || parts[0].empty() ||
      parts[0].find('=') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        StrCat("flash: expected DIR[,key=value...], not '", spec, "'"));
  }
  out.dir = std::string(parts[0]);
  // The preset first, whatever its place: the other keys change it.
  std::string preset;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i].starts_with("preset=")) preset = parts[i].substr(7);
  }
  auto model = FlashModel::Preset(preset);
  if (!model.ok()) return model.status();
  FlashOptions& o = out.options.model = *model;
  FlashGeometry& g = o.geometry;
  FlashTiming& t = o.timing;
  for (size_t i = 1; i < parts.size(); ++i) {
    const std::string_view kv = parts[i];
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          StrCat("flash: expected key=value, not '", kv, "'"));
    }
    const std::string key(kv.substr(0, eq));
    const std::string value(kv.substr(eq + 1));
    if (key == "preset") continue;
    if (key == "mode") {
      if (value == "auto") {
        o.mode = GcMode::kAuto;
      } else if (value == "coordinated") {
        o.mode = GcMode::kCoordinated;
      } else if (value == "self") {
        o.mode = GcMode::kSelf;
      } else {
        return absl::InvalidArgumentError(StrCat(
            "flash: mode '", value, "' is not auto, self or coordinated"));
      }
      continue;
    }
    static constexpr std::string_view kNumbers[] = {
        "dilation",       "channels",        "dies_per_channel",
        "blocks_per_die", "pages_per_block", "page_bytes",
        "spare",          "read_us",         "program_us",
        "erase_us",       "buffer_us",       "buffer_pages",
        "suspend_us",     "soft_threshold",  "gc_threshold",
        "gc_target",      "bg_idle_ms",      "vssds",
        "gc_yields"};
    if (std::find(std::begin(kNumbers), std::end(kNumbers), key) ==
        std::end(kNumbers)) {
      std::string keys = "preset, mode";
      for (std::string_view k : kNumbers) StrAppend(&keys, ", ", k);
      return absl::InvalidArgumentError(
          StrCat("flash: unknown option '", key, "' (", keys, ")"));
    }
    double v = 0;
    if (!absl::SimpleAtod(value, &v) || v < 0) {
      return absl::InvalidArgumentError(
          StrCat("flash: ", key, "=", value, " is not a number"));
    }
    const auto u32 = static_cast<uint32_t>(v);
    const auto us = static_cast<uint64_t>(v * 1000);
    if (key == "dilation") {
      out.options.dilation = v;
    } else if (key == "vssds") {
      out.vssds = u32;
    } else if (key == "gc_yields") {
      o.gc_yields = v != 0;
    } else if (key == "channels") {
      g.channels = u32;
    } else if (key == "dies_per_channel") {
      g.dies_per_channel = u32;
    } else if (key == "blocks_per_die") {
      g.blocks_per_die = u32;
    } else if (key == "pages_per_block") {
      g.pages_per_block = u32;
    } else if (key == "page_bytes") {
      g.page_bytes = u32;
    } else if (key == "spare") {
      g.spare = v;
    } else if (key == "read_us") {
      t.read_ns = us;
    } else if (key == "program_us") {
      t.program_ns = us;
    } else if (key == "erase_us") {
      t.erase_ns = us;
    } else if (key == "buffer_us") {
      t.buffer_ns = us;
    } else if (key == "buffer_pages") {
      t.buffer_pages = u32;
    } else if (key == "suspend_us") {
      t.suspend_ns = us;
    } else if (key == "soft_threshold") {
      o.soft_threshold = v;
    } else if (key == "gc_threshold") {
      o.gc_threshold = v;
    } else if (key == "gc_target") {
      o.gc_target = v;
    } else if (key == "bg_idle_ms") {
      o.bg_idle_ns = static_cast<uint64_t>(v * 1e6);
    }
  }
  if (out.vssds == 0 || out.vssds > g.channels || g.channels % out.vssds != 0) {
    return absl::InvalidArgumentError(StrCat(
        "flash: vssds=", out.vssds, " must divide channels=", g.channels));
  }
  if (absl::Status s = FlashModel::Check(o); !s.ok()) return s;
  if (!(out.options.dilation >= 1.0)) {
    return absl::InvalidArgumentError(StrCat(
        "flash: dilation ", out.options.dilation, " must be at least 1"));
  }
  return out;
}

std::vector<FlashEndpointSpec::Part> FlashEndpointSpec::Parts(
    const std::string& name) const {
  if (vssds <= 1) return {Part{name, dir, options}};
  std::vector<Part> parts;
  for (uint32_t i = 0; i < vssds; ++i) {
    Part p{StrCat(name, ".v", i), StrCat(dir, "/v", i), options};
    p.options.model.geometry.channels /= vssds;
    p.options.model.timing.buffer_pages =
        std::max<uint32_t>(1, options.model.timing.buffer_pages / vssds);
    parts.push_back(std::move(p));
  }
  return parts;
}

struct FlashEndpoint::Due {
  Io* parent;
  std::unique_ptr<Io> done;  // the IO the directory performed
};

absl::StatusOr<std::shared_ptr<FlashEndpoint>> FlashEndpoint::Open(
    const std::string& dir, const Options& options) {
  if (absl::Status s = FlashModel::Check(options.model); !s.ok()) return s;
  if (!(options.dilation >= 1.0) || !std::isfinite(options.dilation)) {
    return absl::InvalidArgumentError(
        StrCat("flash: dilation ", options.dilation, " must be at least 1"));
  }
  auto inner = LocalEndpoint::Open(dir);
  if (!inner.ok()) return inner.status();
  return std::shared_ptr<FlashEndpoint>(
      new FlashEndpoint(dir, *std::move(inner), options));
}

FlashEndpoint::FlashEndpoint(std::string dir, std::shared_ptr<Endpoint> inner,
                             const Options& options)
    : dir_(std::move(dir)),
      inner_(std::move(inner)),
      dilation_(options.dilation),
      epoch_ns_(MonotonicNanos()),
      page_bytes_(options.model.geometry.page_bytes),
      model_(options.model),
      timer_([this] { TimerLoop(); }) {
  MutexLock l(&mu_);
  free_pages_.reserve(model_.logical_pages());
  for (uint64_t p = model_.logical_pages(); p > 0; --p) {
    free_pages_.push_back(static_cast<uint32_t>(p - 1));
  }
}

FlashEndpoint::~FlashEndpoint() {
  {
    MutexLock l(&timer_mu_);
    stop_ = true;
    timer_cv_.SignalAll();
  }
  timer_.join();
  // IOs still waiting for their time complete now: none is lost.
  std::multimap<uint64_t, std::unique_ptr<Due>> left;
  {
    MutexLock l(&timer_mu_);
    left.swap(due_);
  }
  for (auto& [at, due] : left) {
    due->parent->AdoptResults(*due->done);
    due->parent->Complete(due->done->status);
  }
}

uint64_t FlashEndpoint::ModelNow() const {
  return static_cast<uint64_t>(
      static_cast<double>(MonotonicNanos() - epoch_ns_) / dilation_);
}

FlashState FlashEndpoint::State() const {
  const uint64_t now = ModelNow();
  MutexLock l(&mu_);
  return model_.State(now);
}

absl::Status FlashEndpoint::Warm(const std::string& path, uint64_t bytes,
                                 double overwrites, uint64_t seed) {
  const std::string file = StrCat(dir_, "/", path);
  const int fd = ::open(file.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return ErrnoStatus(err, StrCat("warm ", file));
  }
  ::close(fd);
  const uint64_t n = (bytes + page_bytes_ - 1) / page_bytes_;
  MutexLock l(&mu_);
  std::vector<uint32_t>& pages = files_[path];
  if (pages.size() < n) pages.resize(n, kNoPage);
  uint64_t missing = 0;
  for (uint32_t p : pages) missing += p == kNoPage ? 1 : 0;
  if (missing > free_pages_.size()) {
    return absl::ResourceExhaustedError(StrCat(
        "warm ", path, ": ", missing, " pages, ", free_pages_.size(), " free"));
  }
  for (uint32_t& p : pages) {
    if (p == kNoPage) {
      p = free_pages_.back();
      free_pages_.pop_back();
    }
  }
  model_.Warm(pages, overwrites, seed);
  return absl::OkStatus();
}

std::string FlashEndpoint::Describe() const {
  return StrCat("flash ", inner_->Describe());
}

void FlashEndpoint::Gauges(
    std::string_view name,
    const absl::FunctionRef<void(std::string, int64_t)>& add) const {
  const uint64_t now = ModelNow();
  FlashState st;
  uint64_t used = 0, logical = 0;
  uint64_t granted[3];
  {
    MutexLock l(&mu_);
    st = model_.State(now);
    logical = model_.logical_pages();
    used = logical - free_pages_.size();
    std::copy(granted_, granted_ + 3, granted);
  }
  const std::string prefix = StrCat("flash.", name, ".");
  auto put = [&](std::string_view key, double value) {
    add(StrCat(prefix, key), static_cast<int64_t>(value));
  };
  put("free_permille", st.free_ratio * 1000 + 0.5);
  put("gc_active", st.gc_active ? 1 : 0);
  put("gc_need", static_cast<int>(st.need));
  put("predicted_idle_us", static_cast<double>(st.predicted_idle_ns) / 1000);
  put("used_pages", static_cast<double>(used));
  put("logical_pages", static_cast<double>(logical));
  put("reads", static_cast<double>(st.reads));
  put("writes", static_cast<double>(st.writes));
  put("trims", static_cast<double>(st.trims));
  put("reads_behind_gc", static_cast<double>(st.reads_behind_gc));
  put("writes_waited", static_cast<double>(st.writes_waited));
  put("gc_passes", static_cast<double>(st.gc_passes));
  put("forced_gc", static_cast<double>(st.forced_gc));
  put("pages_copied", static_cast<double>(st.pages_copied));
  put("erases", static_cast<double>(st.erases));
  put("erase_min", static_cast<double>(st.erase_min));
  put("erase_max", static_cast<double>(st.erase_max));
  put("erase_mean_milli", st.erase_mean * 1000);
  put("erase_variance_milli", st.erase_variance * 1000);
  put("gc_soft", static_cast<double>(granted[0]));
  put("gc_regular", static_cast<double>(granted[1]));
  put("gc_bg", static_cast<double>(granted[2]));
}

uint64_t FlashEndpoint::StartGc() {
  const uint64_t now = ModelNow();
  MutexLock l(&mu_);
  return model_.StartGc(now);
}

uint64_t FlashEndpoint::HoldForGc(uint64_t model_ns) {
  const uint64_t now = ModelNow();
  MutexLock l(&mu_);
  return model_.HoldForGc(now, now + model_ns);
}

uint64_t FlashEndpoint::used_pages() const {
  MutexLock l(&mu_);
  return model_.logical_pages() - free_pages_.size();
}

void FlashEndpoint::TrimFromLocked(std::vector<uint32_t>& pages,
                                   uint64_t first_page, uint64_t now) {
  for (uint64_t p = first_page; p < pages.size(); ++p) {
    if (pages[p] == kNoPage) continue;
    model_.Trim(pages[p], now);
    free_pages_.push_back(pages[p]);
  }
  if (first_page < pages.size()) pages.resize(first_page);
}

absl::StatusOr<uint64_t> FlashEndpoint::Model(const Io& io,
                                              std::string_view path) {
  const uint64_t now = ModelNow();
  const Op op = io.header.op;
  MutexLock l(&mu_);
  const uint64_t fast = now + model_.options().timing.buffer_ns;
  if ((op != Op::kRead && op != Op::kWrite) || io.header.length == 0) {
    return fast;  // metadata: the controller's DRAM
  }
  const uint64_t first = io.header.offset / page_bytes_;
  const uint64_t last = (io.header.offset + io.header.length - 1) / page_bytes_;
  uint64_t done = now;
  if (op == Op::kRead) {
    auto it = files_.find(absl::string_view(path.data(), path.size()));
    for (uint64_t p = first; p <= last; ++p) {
      const bool mapped = it != files_.end() && p < it->second.size() &&
                          it->second[p] != kNoPage;
      done = std::max(done,
                      mapped ? model_.Read(it->second[p], now).done_ns : fast);
    }
    return done;
  }
  std::vector<uint32_t>& pages = files_[std::string(path)];
  uint64_t needed = 0;
  for (uint64_t p = first; p <= last; ++p) {
    needed += p >= pages.size() || pages[p] == kNoPage ? 1 : 0;
  }
  if (needed > free_pages_.size()) {
    if (pages.empty()) files_.erase(std::string(path));
    return ErrnoStatus(ENOSPC, StrCat("flash: ", needed, " new pages for ",
                                      path, ", ", free_pages_.size(), " free"));
  }
  if (pages.size() <= last) pages.resize(last + 1, kNoPage);
  for (uint64_t p = first; p <= last; ++p) {
    if (pages[p] == kNoPage) {
      pages[p] = free_pages_.back();
      free_pages_.pop_back();
    }
    done = std::max(done, model_.Write(pages[p], now).done_ns);
  }
  return done;
}

std::string FlashEndpoint::StateText() const {
  const uint64_t now = ModelNow();
  FlashState st;
  GcMode mode;
  bool bg_ok;
  {
    MutexLock l(&mu_);
    // Asked every poll, under the lock IOs take: no wear (O(blocks)).
    st = model_.State(now, /*wear=*/false);
    mode = model_.options().mode;
    bg_ok = st.bg_ok;
  }
  const double left_ns =
      st.gc_until_ns > now
          ? static_cast<double>(st.gc_until_ns - now) * dilation_
          : 0.0;
  return StrCat(
      "free_permille=", static_cast<int>(st.free_ratio * 1000 + 0.5),
      " need=", GcNeedName(st.need), " gc=", st.gc_active ? 1 : 0,
      " gc_left_us=", static_cast<uint64_t>(left_ns / 1000), " idle_us=",
      static_cast<uint64_t>(static_cast<double>(st.predicted_idle_ns) *
                            dilation_ / 1000),
      " bg_ok=", bg_ok ? 1 : 0, " mode=",
      mode == GcMode::kAuto   ? "auto"
      : mode == GcMode::kSelf ? "self"
                              : "coordinated",
      " passes=", st.gc_passes);
}

void FlashEndpoint::Control(Io* io) {
  if (io->args.caller.set) {
    io->Complete(ErrnoStatus(
        EPERM,
        StrCat(io->args.xattr_name, ": the sSwitch's own, not a user's")));
    return;
  }
  if (io->header.op == Op::kGetxattr &&
      io->args.xattr_name == kFlashStateXattr) {
    io->data = StateText();
    io->Complete();
    return;
  }
  if (io->header.op != Op::kSetxattr || io->args.xattr_name != kFlashGcXattr) {
    io->Complete(ErrnoStatus(
        EINVAL, StrCat(OpName(io->header.op), " of ", io->args.xattr_name,
                       ": not a flash control")));
    return;
  }
  const std::string_view kind(io->write_data.data(), io->write_data.size());
  const int k = kind == "soft"      ? 0
                : kind == "regular" ? 1
                : kind == "bg"      ? 2
                                    : -1;
  if (k < 0) {
    io->Complete(ErrnoStatus(EINVAL, StrCat(kFlashGcXattr, ": '", kind,
                                            "' is not soft, regular or bg")));
    return;
  }
  const uint64_t now = ModelNow();
  {
    MutexLock l(&mu_);
    ++granted_[k];
    // Background GC uses the idle time the device foresees, no more: a
    // pass to gc_target would hold dies past it when IO comes back.
    model_.StartGc(now, k == 2 ? now + model_.predicted_idle_ns() : UINT64_MAX);
  }
  io->Complete();
}

void FlashEndpoint::Submit(Io* io, std::string_view path) {
  if ((io->header.op == Op::kGetxattr || io->header.op == Op::kSetxattr) &&
      io->args.xattr_name.starts_with("sroute.flash.")) {
    Control(io);
    return;
  }
  auto when = Model(*io, path);
  if (!when.ok()) {
    io->Complete(when.status());
    return;
  }
  auto* child = new Io;
  child->header = io->header;
  child->args = io->args;
  child->read_buffer = io->read_buffer;
  child->write_data = io->write_data;
  child->set_completion(
      [this, io, done = *when, path = std::string(path)](Io& c) {
        if (c.status.ok()) FollowNamespace(c, path);
        CompleteAt(io, std::unique_ptr<Io>(&c), done);
      });
  inner_->Submit(child, path);
}

// The namespace changed in the directory: the pages follow the names.
void FlashEndpoint::FollowNamespace(const Io& c, const std::string& path) {
  const uint64_t now = ModelNow();
  const Op op = c.header.op;
  uint64_t keep = UINT64_MAX;  // bytes a truncate keeps
  if (op == Op::kTruncate ||
      (op == Op::kSetattr && (c.args.to_set & kSetSize) != 0)) {
    keep = c.args.size;
  } else if ((op == Op::kOpen || op == Op::kCreate) &&
             (c.args.open_flags & O_TRUNC) != 0) {
    keep = 0;
  }
  MutexLock l(&mu_);
  auto it = files_.find(path);
  if (op == Op::kUnlink && it != files_.end()) {
    TrimFromLocked(it->second, 0, now);
    files_.erase(it);
  } else if (keep != UINT64_MAX && it != files_.end()) {
    TrimFromLocked(it->second, (keep + page_bytes_ - 1) / page_bytes_, now);
  } else if (op == Op::kRenameFrom && !c.args.second_file.empty()) {
    const std::string& to = c.args.second_file;
    std::vector<uint32_t> moved, replaced;
    if (it != files_.end()) {
      moved = std::move(it->second);
      files_.erase(it);
    }
    if (auto t = files_.find(to); t != files_.end()) {
      replaced = std::move(t->second);
      files_.erase(t);
    }
    if ((c.args.rename_flags & RENAME_EXCHANGE) != 0) {
      if (!replaced.empty()) files_[path] = std::move(replaced);
    } else {
      TrimFromLocked(replaced, 0, now);
    }
    if (!moved.empty()) files_[to] = std::move(moved);
  }
}

void FlashEndpoint::CompleteAt(Io* io, std::unique_ptr<Io> done,
                               uint64_t model_ns) {
  const uint64_t wall =
      epoch_ns_ +
      static_cast<uint64_t>(static_cast<double>(model_ns) * dilation_);
  auto due = std::make_unique<Due>();
  due->parent = io;
  due->done = std::move(done);
  MutexLock l(&timer_mu_);
  const bool first = due_.empty() || wall < due_.begin()->first;
  due_.emplace(wall, std::move(due));
  if (first) timer_cv_.Signal();
}

void FlashEndpoint::TimerLoop() {
  for (;;) {
    std::vector<std::unique_ptr<Due>> ready;
    {
      MutexLock l(&timer_mu_);
      for (;;) {
        if (stop_) return;
        if (due_.empty()) {
          timer_cv_.Wait(&timer_mu_);
          continue;
        }
        const uint64_t now = MonotonicNanos();
        const uint64_t next = due_.begin()->first;
        if (next > now) {
          timer_cv_.WaitFor(&timer_mu_, std::chrono::nanoseconds(next - now));
          continue;
        }
        while (!due_.empty() && due_.begin()->first <= now) {
          ready.push_back(std::move(due_.begin()->second));
          due_.erase(due_.begin());
        }
        break;
      }
    }
    for (auto& d : ready) {
      d->parent->AdoptResults(*d->done);
      d->parent->Complete(d->done->status);
    }
  }
}

}  // namespace sroute

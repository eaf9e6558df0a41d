// SPDX-License-Identifier: Apache-2.0
#include "hostctl/copy_tree.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "util/clock.h"
#include "util/errno_status.h"
#include "util/mutex.h"
#include "util/strings.h"

namespace sroute {
namespace {

constexpr uint64_t kChunk = 64 << 10;
constexpr int kMaxDepth = 256;
constexpr std::string_view kReserved = ".sroute-wl-";

bool IsGone(const absl::Status& s) {
  return absl::IsNotFound(s) || ErrnoOf(s) == ENOENT;
}

// One IO at a time, waited for. Not absl::Notification: Debian's abseil is
// not built with ThreadSanitizer, which then sees no order between the IO
// thread's writes to the Io and ours.
class Caller {
 public:
  explicit Caller(SSwitch& sw) : sw_(sw) {}

  absl::Status Call(Io& io, const std::string& file) {
    io.header.source = "sroute-copy";
    io.header.file = file;
    bool done = false;
    io.set_completion([&](Io&) {
      MutexLock l(&mu_);
      done = true;
      cv_.SignalAll();
    });
    sw_.SubmitOwn(&io, file);
    MutexLock l(&mu_);
    while (!done) cv_.Wait(&mu_);
    if (!io.status.ok()) {
      return absl::Status(
          io.status.code(),
          StrCat(OpName(io.header.op), " ", file, ": ", io.status.message()));
    }
    return absl::OkStatus();
  }

 private:
  SSwitch& sw_;
  Mutex mu_;
  CondVar cv_;
};

// Sleeps so that `written` bytes since `start_ns` stay within `rate` bytes
// per second (0: no limit).
void PaceWrites(uint64_t start_ns, uint64_t written, uint64_t rate) {
  if (rate == 0) return;
  const uint64_t due =
      start_ns + static_cast<uint64_t>(static_cast<unsigned __int128>(written) *
                                       1'000'000'000 / rate);
  const uint64_t now = MonotonicNanos();
  if (due > now) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(due - now));
  }
}

// "a/b/c" -> {"a", "b", "c"}.
std::vector<std::string> Components(std::string_view path) {
  std::vector<std::string> out;
  for (std::string_view c : StrSplit(path, '/')) {
    if (!c.empty()) out.emplace_back(c);
  }
  return out;
}

class TreeCopy {
 public:
  TreeCopy(SSwitch& sw, const proto::Copy& request,
           proto::CopyProgress* progress)
      : caller_(sw),
        req_(request),
        progress_(progress),
        after_(Components(request.after())),
        start_ns_(MonotonicNanos()),
        deadline_ns_(request.budget_ms() == 0
                         ? UINT64_MAX
                         : start_ns_ +
                               uint64_t{request.budget_ms()} * 1'000'000) {}

  absl::Status Run() {
    for (const std::string* p : {&req_.from(), &req_.to()}) {
      if (p == &req_.to() && req_.mode() != proto::Copy::COPY &&
          req_.mode() != proto::Copy::SYNC) {
        continue;
      }
      if (!p->starts_with("//") || p->size() < 3 ||
          p->find("/..") != std::string::npos) {
        return absl::InvalidArgumentError(
            StrCat("copy: '", *p, "' is not a name //ENDPOINT/PATH"));
      }
    }
    from_ = Trim(req_.from());
    to_ = Trim(req_.to());
    if (req_.mode() == proto::Copy::COPY || req_.mode() == proto::Copy::SYNC) {
      if (to_ == from_ ||
          to_.starts_with(from_.back() == '/' ? from_ : from_ + "/")) {
        return absl::InvalidArgumentError(
            StrCat("copy: ", req_.to(), " lies in ", req_.from()));
      }
    }
    if (req_.mode() == proto::Copy::REMOVE) {
      absl::Status s = Remove(from_, 0);
      progress_->set_done(s.ok());
      return s;
    }
    std::vector<std::string> at;
    absl::Status s = Entry(at, 0);
    if (s.ok() || budget_spent_) {
      progress_->set_done(s.ok());
      return absl::OkStatus();
    }
    return s;
  }

 private:
  // "//ep/a/" -> "//ep/a"; an endpoint's root is "//ep/".
  static std::string Trim(std::string p) {
    while (p.size() > 3 && p.back() == '/') p.pop_back();
    if (p.find('/', 2) == std::string::npos) p += '/';
    return p;
  }
  static std::string Join(const std::string& base,
                          const std::vector<std::string>& rel) {
    std::string out = base;
    for (const std::string& c : rel) {
      // An empty base gives "/c/..." (back() of an empty string is UB).
      StrAppend(&out, !out.empty() && out.back() == '/' ? "" : "/", c);
    }
    return out;
  }
  // A wear-levelling swap's own folder: right under an endpoint's root.
  static bool Reserved(const std::string& full) {
    const size_t slash = full.find('/', 2);
    if (slash == std::string::npos) return false;
    const std::string_view rest = std::string_view(full).substr(slash + 1);
    return rest.starts_with(kReserved) &&
           rest.find('/') == std::string_view::npos;
  }

  // Where `rel` lies against the resume point: 0 at or before it and
  // done, 1 a folder that holds it (only what is inside goes on), 2 after
  // it.
  int Place(const std::vector<std::string>& rel) const {
    if (after_.empty()) return 2;
    const size_t n = std::min(rel.size(), after_.size());
    for (size_t i = 0; i < n; ++i) {
      if (rel[i] != after_[i]) return rel[i] < after_[i] ? 0 : 2;
    }
    return rel.size() < after_.size() ? 1 : 0;
  }

  absl::Status Entry(std::vector<std::string>& rel, int depth) {
    if (depth > kMaxDepth) {
      return absl::FailedPreconditionError(
          StrCat("copy: ", Join(from_, rel), " lies too deep"));
    }
    const std::string src = Join(from_, rel);
    const std::string dst = Join(to_, rel);
    const int place = Place(rel);
    if (place == 0) return absl::OkStatus();
    Io st;
    st.header.op = Op::kGetattr;
    absl::Status s = caller_.Call(st, src);
    if (IsGone(s) && !rel.empty()) return absl::OkStatus();  // removed since
    if (!s.ok()) return s;
    const mode_t type = st.attr.st_mode & S_IFMT;
    // Device nodes, pipes and sockets stay behind (not data to move).
    if (type != S_IFREG && type != S_IFDIR && type != S_IFLNK) {
      return absl::OkStatus();
    }
    const bool write = req_.mode() != proto::Copy::COUNT;
    if (place == 2) {
      if (write) {
        if (s = Make(src, dst, st.attr); !s.ok()) return s;
      }
      if (type == S_IFREG) {
        const uint64_t size = static_cast<uint64_t>(st.attr.st_size);
        if (write) {
          if (s = Bytes(src, dst, size); !s.ok()) return s;
        }
        progress_->set_files(progress_->files() + 1);
        progress_->set_bytes(progress_->bytes() + size);
      }
      if (write && type != S_IFDIR) {
        if (s = Attrs(dst, st.attr); !s.ok()) return s;
      }
    }
    if (type == S_IFDIR) {
      Io list;
      list.header.op = Op::kReaddir;
      if (s = caller_.Call(list, src); !s.ok()) return s;
      std::vector<std::string> names;
      for (const DirEntry& e : list.entries) {
        if (e.name == "." || e.name == "..") continue;
        if (Reserved(Join(src, {e.name}))) continue;
        names.push_back(e.name);
      }
      std::sort(names.begin(), names.end());
      if (req_.mode() == proto::Copy::SYNC) {
        if (s = RemoveExtra(dst, names, depth); !s.ok()) return s;
      }
      for (const std::string& name : names) {
        rel.push_back(name);
        s = Entry(rel, depth + 1);
        rel.pop_back();
        if (!s.ok()) return s;
      }
      // Times last: making what is inside changed them.
      if (write && place == 2) {
        if (s = Attrs(dst, st.attr); !s.ok()) return s;
      }
    }
    if (place == 2) {
      progress_->set_after(rel.empty() ? "" : Join("", rel).substr(1));
      if (type != S_IFDIR &&
          (MonotonicNanos() >= deadline_ns_ ||
           (req_.max_files() != 0 && ++files_ >= req_.max_files()))) {
        budget_spent_ = true;  // not an IO's error: the call ends here
        return absl::AbortedError("budget spent");
      }
    }
    return absl::OkStatus();
  }

  // `dst` as a name of `src`'s type (one of another type is replaced).
  absl::Status Make(const std::string& src, const std::string& dst,
                    const struct stat& attr) {
    const mode_t type = attr.st_mode & S_IFMT;
    Io have;
    have.header.op = Op::kGetattr;
    absl::Status s = caller_.Call(have, dst);
    if (s.ok()) {
      if ((have.attr.st_mode & S_IFMT) == type && type != S_IFLNK) {
        return absl::OkStatus();
      }
      if (s = Remove(dst, 0); !s.ok()) return s;
    } else if (!IsGone(s)) {
      return s;
    }
    Io make;
    make.args.mode = attr.st_mode & 07777;
    if (type == S_IFREG) {
      make.header.op = Op::kCreate;
      make.args.open_flags = O_CREAT | O_WRONLY;
      make.args.mode |= S_IWUSR;  // its bytes go in before its mode
    } else if (type == S_IFDIR) {
      make.header.op = Op::kMkdir;
      make.args.mode |= S_IWUSR | S_IXUSR;
    } else {  // a symbolic link (Entry copies nothing else)
      Io text;
      text.header.op = Op::kReadlink;
      if (s = caller_.Call(text, src); !s.ok()) return s;
      make.header.op = Op::kSymlink;
      make.args.symlink_text = text.data;
    }
    return caller_.Call(make, dst);
  }

  absl::Status Bytes(const std::string& src, const std::string& dst,
                     uint64_t size) {
    const bool sync = req_.mode() == proto::Copy::SYNC;
    std::string buf(kChunk, '\0'), have(sync ? kChunk : 0, '\0');
    for (uint64_t off = 0; off < size; off += kChunk) {
      const uint64_t n = std::min(kChunk, size - off);
      auto got = ReadAt(src, off, std::span<char>(buf.data(), n));
      if (!got.ok()) return got.status();
      if (*got == 0) break;
      if (sync) {
        auto had = ReadAt(dst, off, std::span<char>(have.data(), *got));
        if (!had.ok()) return had.status();
        if (*had == *got &&
            std::equal(buf.begin(), buf.begin() + *got, have.begin())) {
          continue;
        }
      }
      Io w;
      w.header.op = Op::kWrite;
      w.header.offset = off;
      w.header.length = static_cast<uint32_t>(*got);
      w.write_data = std::span<const char>(buf.data(), *got);
      if (absl::Status s = caller_.Call(w, dst); !s.ok()) return s;
      progress_->set_bytes_written(progress_->bytes_written() + *got);
      Pace();
      if (*got < n) break;
    }
    return absl::OkStatus();
  }

  // Reads up to into.size() bytes of `file` at `off`; returns how many.
  absl::StatusOr<uint64_t> ReadAt(const std::string& file, uint64_t off,
                                  std::span<char> into) {
    Io r;
    r.header.op = Op::kRead;
    r.header.offset = off;
    r.header.length = static_cast<uint32_t>(into.size());
    r.read_buffer = into;
    if (absl::Status s = caller_.Call(r, file); !s.ok()) return s;
    return r.bytes;
  }

  void Pace() {
    PaceWrites(start_ns_, progress_->bytes_written(), req_.rate_bytes_per_s());
  }

  // Size, mode, owner and times of `dst` as `attr`.
  absl::Status Attrs(const std::string& dst, const struct stat& attr) {
    Io set;
    set.header.op = Op::kSetattr;
    set.args.to_set = kSetMode | kSetUid | kSetGid | kSetAtime | kSetMtime;
    if (S_ISREG(attr.st_mode)) set.args.to_set |= kSetSize;
    if (S_ISLNK(attr.st_mode)) set.args.to_set &= ~kSetMode;
    set.args.mode = attr.st_mode & 07777;
    set.args.uid = attr.st_uid;
    set.args.gid = attr.st_gid;
    set.args.size = static_cast<uint64_t>(attr.st_size);
    set.args.atime = attr.st_atim;
    set.args.mtime = attr.st_mtim;
    return caller_.Call(set, dst);
  }

  // SYNC: the names of folder `dst` that `src` has not are removed.
  absl::Status RemoveExtra(const std::string& dst,
                           const std::vector<std::string>& keep, int depth) {
    Io list;
    list.header.op = Op::kReaddir;
    absl::Status s = caller_.Call(list, dst);
    if (IsGone(s)) return absl::OkStatus();
    if (!s.ok()) return s;
    for (const DirEntry& e : list.entries) {
      if (e.name == "." || e.name == "..") continue;
      const std::string full = Join(dst, {e.name});
      if (Reserved(full)) continue;
      if (std::binary_search(keep.begin(), keep.end(), e.name)) continue;
      if (s = Remove(full, depth + 1); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Remove(const std::string& at, int depth) {
    if (depth > kMaxDepth) {
      return absl::FailedPreconditionError(
          StrCat("copy: ", at, " lies too deep"));
    }
    Io st;
    st.header.op = Op::kGetattr;
    absl::Status s = caller_.Call(st, at);
    if (IsGone(s)) return absl::OkStatus();
    if (!s.ok()) return s;
    const bool root = at.find('/', 2) == at.size() - 1;
    if (S_ISDIR(st.attr.st_mode)) {
      Io list;
      list.header.op = Op::kReaddir;
      if (s = caller_.Call(list, at); !s.ok()) return s;
      for (const DirEntry& e : list.entries) {
        if (e.name == "." || e.name == "..") continue;
        const std::string full = Join(at, {e.name});
        if (Reserved(full)) continue;
        if (s = Remove(full, depth + 1); !s.ok()) return s;
      }
    }
    if (root) return absl::OkStatus();  // an endpoint's root stays
    Io rm;
    rm.header.op = S_ISDIR(st.attr.st_mode) ? Op::kRmdir : Op::kUnlink;
    s = caller_.Call(rm, at);
    if (IsGone(s)) return absl::OkStatus();
    if (!s.ok()) return s;
    progress_->set_removed(progress_->removed() + 1);
    return absl::OkStatus();
  }

  Caller caller_;
  const proto::Copy& req_;
  proto::CopyProgress* progress_;
  const std::vector<std::string> after_;
  const uint64_t start_ns_;
  const uint64_t deadline_ns_;
  std::string from_, to_;
  uint32_t files_ = 0;  // names other than folders finished
  bool budget_spent_ = false;
};

// RECLAIM: rewrites through the host's rules, chunk by chunk, every range
// a track_writes read rule sends away from its file, until none is left.
class Reclaim {
 public:
  Reclaim(SSwitch& sw, const proto::Copy& request,
          proto::CopyProgress* progress)
      : sw_(sw),
        req_(request),
        progress_(progress),
        start_ns_(MonotonicNanos()),
        deadline_ns_(request.budget_ms() == 0
                         ? UINT64_MAX
                         : start_ns_ +
                               uint64_t{request.budget_ms()} * 1'000'000),
        chunk_(request.chunk_bytes() == 0 ? 1 << 20 : request.chunk_bytes()) {}

  absl::Status Run() {
    const std::string& prefix = req_.from();
    if (!prefix.starts_with("//") || prefix.size() < 3 ||
        prefix.find("/..") != std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat("reclaim: '", prefix, "' is not a name //ENDPOINT/PATH"));
    }
    std::optional<Away> last;
    while (true) {
      std::vector<Away> away = Ranges();
      uint64_t left = 0;
      for (const Away& r : away) left += r.end - r.start;
      progress_->set_bytes(left);
      if (away.empty()) {
        progress_->set_done(true);
        return absl::OkStatus();
      }
      if (MonotonicNanos() >= deadline_ns_) return absl::OkStatus();
      const Away& r = away.front();
      if (last && last->file == r.file && last->start == r.start &&
          last->end == r.end) {
        return absl::FailedPreconditionError(
            StrCat("reclaim: writing ", r.file, "[", r.start, ":", r.end,
                   "] again did not bring it home: send the file's writes "
                   "home first (track_writes(home) to where its other IO "
                   "goes, or track_writes() to the file itself)"));
      }
      last = r;
      if (absl::Status s = Move(r); !s.ok()) return s;
    }
  }

 private:
  // A range a delegate's read rule sends to another file.
  struct Away {
    std::string file;
    uint64_t start, end;
    std::string source;  // the rule's tenant, or "" for any
  };

  std::vector<Away> Ranges() const {
    std::vector<Away> out;
    for (const RuleInfo& info : sw_.ListRules()) {
      if (!info.owner.starts_with("delegate:")) continue;
      const HeaderPattern& p = info.rule.pattern;
      if (p.ops != kOpClassRead || p.file.kind != FilePattern::Kind::kExact ||
          !p.file.range || !p.file.text.starts_with(req_.from()) ||
          p.source.kind == SourcePattern::Kind::kStage) {
        continue;
      }
      bool home = info.rule.detours.size() == 1 &&
                  info.rule.detours[0].target.kind == Target::Kind::kFile &&
                  info.rule.detours[0].target.file == p.file.text;
      if (home) continue;
      out.push_back(Away{p.file.text, p.file.range->start, p.file.range->end,
                         p.source.kind == SourcePattern::Kind::kTenant
                             ? p.source.name
                             : std::string()});
    }
    std::sort(out.begin(), out.end(), [](const Away& x, const Away& y) {
      return std::tie(x.file, x.start) < std::tie(y.file, y.start);
    });
    return out;
  }

  // Moves the first chunk of `r` home.
  absl::Status Move(const Away& r) {
    const uint64_t a = r.start, b = std::min(r.end, r.start + chunk_);
    IoHeader w;
    w.source = r.source;
    w.op = Op::kWrite;
    w.file = r.file;
    w.offset = a;
    w.length = b - a;
    HeaderPattern hold;
    hold.ops = kOpClassWrite;
    hold.file.kind = FilePattern::Kind::kExact;
    hold.file.text = r.file;
    hold.file.range = ByteRange{a, b};
    if (absl::Status s = sw_.Quiesce(hold, true); !s.ok()) return s;
    absl::Status s = sw_.Drain(hold, absl::Seconds(30));
    uint64_t written = 0;
    if (s.ok()) s = Rewrite(w, &written);
    if (s.ok() && written == 0) {
      // The file ends before the chunk (it shrank while the range was away;
      // its places were cut with it): no bytes to bring home. Its read
      // rules go while its writes are held (a write after it goes home).
      s = sw_.ForgetDelegateRange(r.file, a, b);
    }
    (void)sw_.Quiesce(hold, false);
    if (!s.ok()) return s;
    if (written == 0) return absl::OkStatus();  // it was past the end
    progress_->set_files(progress_->files() + 1);
    progress_->set_bytes_written(progress_->bytes_written() + written);
    Pace();
    return absl::OkStatus();
  }

  // Reads the range where the rules send reads now and writes it where
  // they send writes (home), both through the quiesce; `*written` the
  // bytes written. None: the file ends at or before the range (a read past
  // a place's end comes back zero-filled up to the home's size, so an empty
  // read is the end of the file).
  absl::Status Rewrite(const IoHeader& w, uint64_t* written) {
    std::vector<char> buf(w.length);
    Io rd;
    rd.header = w;
    rd.header.op = Op::kRead;
    rd.read_buffer = std::span<char>(buf.data(), buf.size());
    if (absl::Status s = Routed(rd); !s.ok()) return s;
    // A short read: the file ends there; the rest of the range holds no
    // bytes (a later truncate), so write only what is there.
    if (rd.bytes == 0) return absl::OkStatus();
    Io wr;
    wr.header = w;
    wr.header.length = rd.bytes;
    wr.write_data = std::span<const char>(buf.data(), rd.bytes);
    if (absl::Status s = Routed(wr); !s.ok()) return s;
    if (wr.bytes != rd.bytes) {
      return absl::DataLossError(StrCat("reclaim: short write of ", w.file,
                                        " at ", w.offset, ": ", wr.bytes,
                                        " of ", rd.bytes, " bytes"));
    }
    *written = wr.bytes;
    return absl::OkStatus();
  }

  absl::Status Routed(Io& io) {
    io.passes_quiesce = true;
    bool done = false;
    io.set_completion([&](Io&) {
      MutexLock l(&mu_);
      done = true;
      cv_.SignalAll();
    });
    sw_.Route(&io);
    MutexLock l(&mu_);
    while (!done) cv_.Wait(&mu_);
    if (!io.status.ok()) {
      return absl::Status(
          io.status.code(),
          StrCat("reclaim: ", OpName(io.header.op), " ", io.header.file, " at ",
                 io.header.offset, ": ", io.status.message()));
    }
    return absl::OkStatus();
  }

  void Pace() {
    PaceWrites(start_ns_, progress_->bytes_written(), req_.rate_bytes_per_s());
  }

  SSwitch& sw_;
  const proto::Copy& req_;
  proto::CopyProgress* progress_;
  const uint64_t start_ns_;
  const uint64_t deadline_ns_;
  const uint64_t chunk_;
  Mutex mu_;
  CondVar cv_;
};

}  // namespace

absl::Status CopyTree(SSwitch& sw, const proto::Copy& request,
                      proto::CopyProgress* progress) {
  progress->Clear();
  progress->set_after(request.after());
  if (request.mode() == proto::Copy::RECLAIM) {
    return Reclaim(sw, request, progress).Run();
  }
  return TreeCopy(sw, request, progress).Run();
}

}  // namespace sroute

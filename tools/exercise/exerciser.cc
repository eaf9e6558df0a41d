// SPDX-License-Identifier: Apache-2.0
#include "tools/exercise/exerciser.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <sstream>

namespace sroute::testing {
namespace {

constexpr uint64_t kBlock = 4096;

std::string ErrText(int err) { return std::strerror(err); }

// Descriptors are O_CLOEXEC, so that commands a test runs meanwhile do not
// keep its files open. (A forked child still closes them at exec, and
// closing a FUSE file waits for the write-back of its mapped pages: a test
// that quiesces these files must not fork and exec while it holds them;
// see RouteFlipTest.)
class Run {
 public:
  Run(const std::vector<std::string>& paths, const ExerciseOptions& o)
      : paths_(paths), o_(o), rng_(o.seed), model_(paths.size()) {}
  ~Run() {
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
  }

  ExerciseResult Go() {
    ExerciseResult r;
    for (const std::string& p : paths_) {
      const int fd =
          open(p.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) return Failed(r, "open " + p + ": " + ErrText(errno));
      fds_.push_back(fd);
    }
    for (uint64_t i = 0; i < o_.ops; ++i) {
      op_ = i;
      std::string err = Step();
      if (err.empty() && o_.check_every > 0 && (i + 1) % o_.check_every == 0) {
        err = CheckAll();
      }
      if (err.empty() && o_.after_op) err = o_.after_op(i);
      if (!err.empty()) {
        r.ops_done = i;
        return Failed(r, err);
      }
    }
    r.ops_done = o_.ops;
    if (std::string err = CheckAll(); !err.empty()) return Failed(r, err);
    for (const auto& [k, n] : counts_) r.counts.emplace_back(k, n);
    return r;
  }

 private:
  ExerciseResult& Failed(ExerciseResult& r, const std::string& why) {
    std::ostringstream s;
    s << "seed " << o_.seed << ", operation #" << op_ << ": " << why
      << "\nlast operations:\n";
    for (const std::string& l : log_) s << "  " << l << "\n";
    r.ok = false;
    r.error = s.str();
    return r;
  }

  uint64_t Rand(uint64_t n) {  // [0, n)
    return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_);
  }

  // Offsets near 64 KiB boundaries more often than elsewhere: ranged
  // rules cut files there.
  uint64_t Offset(uint64_t limit) {
    if (limit == 0) return 0;
    if (Rand(3) == 0) {
      const uint64_t boundary = (Rand(limit / 65536 + 1) + 1) * 65536;
      const uint64_t off = boundary - std::min(boundary, Rand(64)) + Rand(64);
      return std::min(off, limit - 1);
    }
    return Rand(limit);
  }
  uint64_t Length() {
    switch (Rand(4)) {
      case 0:
        return 1 + Rand(64);
      case 1:
        return 1 + Rand(kBlock * 2);
      default:
        return 1 + Rand(o_.max_io);
    }
  }

  void Log(std::string line) {
    ++counts_[line.substr(0, line.find(' '))];
    log_.push_back("#" + std::to_string(op_) + " " + std::move(line));
    if (log_.size() > 24) log_.pop_front();
  }

  std::string Data(size_t n) {
    std::string d(n, '\0');
    for (size_t i = 0; i < n; i += 8) {
      const uint64_t v = rng_();
      std::memcpy(d.data() + i, &v, std::min<size_t>(8, n - i));
    }
    return d;
  }

  std::string Name(size_t f) const { return "f" + std::to_string(f); }

  // Applies a write of `data` at `off` to the model of file `f`.
  void ModelWrite(size_t f, uint64_t off, const std::string& data) {
    std::string& m = model_[f];
    if (m.size() < off + data.size()) m.resize(off + data.size(), '\0');
    std::memcpy(m.data() + off, data.data(), data.size());
  }

  std::string CheckSize(size_t f) {
    struct stat st;
    if (fstat(fds_[f], &st) != 0) return "fstat: " + ErrText(errno);
    if (static_cast<uint64_t>(st.st_size) != model_[f].size()) {
      return Name(f) + " size " + std::to_string(st.st_size) + ", expected " +
             std::to_string(model_[f].size());
    }
    return "";
  }

  std::string CompareAt(size_t f, uint64_t off, const char* got, size_t n,
                        const std::string& what) {
    const std::string& m = model_[f];
    for (size_t i = 0; i < n; ++i) {
      if (got[i] != m[off + i]) {
        return what + ": byte " + std::to_string(off + i) + " of " + Name(f) +
               " is " + std::to_string(static_cast<unsigned char>(got[i])) +
               ", expected " +
               std::to_string(static_cast<unsigned char>(m[off + i]));
      }
    }
    return "";
  }

  std::string CheckAll() {
    for (size_t f = 0; f < fds_.size(); ++f) {
      if (auto e = CheckSize(f); !e.empty()) return e;
      std::string got(model_[f].size() + 4096, '\0');
      size_t done = 0;
      for (;;) {
        const ssize_t n = pread(fds_[f], got.data() + done, got.size() - done,
                                static_cast<off_t>(done));
        if (n < 0) return "full read: " + ErrText(errno);
        if (n == 0) break;
        done += static_cast<size_t>(n);
        if (done == got.size()) break;
      }
      if (done != model_[f].size()) {
        return "full read of " + Name(f) + " gave " + std::to_string(done) +
               " bytes, expected " + std::to_string(model_[f].size());
      }
      if (auto e = CompareAt(f, 0, got.data(), done, "full read"); !e.empty()) {
        return e;
      }
    }
    return "";
  }

  std::string Step() {
    const size_t f = Rand(fds_.size());
    const int fd = fds_[f];
    std::string& m = model_[f];
    const uint64_t size = m.size();
    const uint64_t pick = Rand(100);
    std::string err;
    if (pick < 28) {
      err = Write(f, fd);
    } else if (pick < 50) {
      err = Read(f, fd, size);
    } else if (pick < 58) {
      err = o_.mmap ? MmapIo(f, fd, size) : Read(f, fd, size);
    } else if (pick < 66) {
      const uint64_t to = Rand(3) == 0 ? Offset(o_.max_size) : Rand(size + 1);
      Log("truncate " + Name(f) + " " + std::to_string(size) + "->" +
          std::to_string(to));
      if (ftruncate(fd, static_cast<off_t>(to)) != 0) {
        return "ftruncate: " + ErrText(errno);
      }
      m.resize(to, '\0');
    } else if (pick < 70) {
      const bool trunc = Rand(2) == 0;
      Log(std::string(trunc ? "reopen_trunc " : "reopen ") + Name(f));
      close(fd);
      fds_[f] =
          open(paths_[f].c_str(), O_RDWR | O_CLOEXEC | (trunc ? O_TRUNC : 0));
      if (fds_[f] < 0) return "reopen: " + ErrText(errno);
      if (trunc) m.clear();
    } else if (pick < 82) {
      err = Fallocate(f, fd, size);
    } else if (pick < 90) {
      err = o_.copy_file_range ? CopyRange(f) : Write(f, fd);
    } else {
      err = Seek(f, fd, size);
    }
    if (!err.empty()) return err;
    if (m.size() > 2 * o_.max_size) {
      m.resize(o_.max_size);
      if (ftruncate(fds_[f], static_cast<off_t>(o_.max_size)) != 0) {
        return "ftruncate back: " + ErrText(errno);
      }
    }
    return CheckSize(f);
  }

  std::string Write(size_t f, int fd) {
    const uint64_t off = Offset(o_.max_size);
    const std::string data = Data(Length());
    Log("write " + Name(f) + " " + std::to_string(data.size()) + "@" +
        std::to_string(off));
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = pwrite(fd, data.data() + done, data.size() - done,
                               static_cast<off_t>(off + done));
      if (n <= 0) return "pwrite: " + ErrText(errno);
      done += static_cast<size_t>(n);
    }
    ModelWrite(f, off, data);
    return "";
  }

  std::string Read(size_t f, int fd, uint64_t size) {
    const uint64_t off = Rand(3) == 0 ? Offset(size + 8192) : Rand(size + 1);
    const uint64_t len = Length();
    Log("read " + Name(f) + " " + std::to_string(len) + "@" +
        std::to_string(off));
    std::string got(len, '\0');
    size_t done = 0;
    for (;;) {
      const ssize_t n = pread(fd, got.data() + done, len - done,
                              static_cast<off_t>(off + done));
      if (n < 0) return "pread: " + ErrText(errno);
      if (n == 0) break;
      done += static_cast<size_t>(n);
      if (done == len) break;
    }
    const uint64_t want = off >= size ? 0 : std::min(len, size - off);
    if (done != want) {
      return "read of " + std::to_string(len) + "@" + std::to_string(off) +
             " gave " + std::to_string(done) + " bytes, expected " +
             std::to_string(want);
    }
    return CompareAt(f, off, got.data(), done, "read");
  }

  // A shared mapping of part of the file (within its size: a mapping
  // past the end would fault): read it, or write it and msync.
  std::string MmapIo(size_t f, int fd, uint64_t size) {
    if (size == 0) return Read(f, fd, size);
    const uint64_t page = (Rand(size) / kBlock) * kBlock;
    const uint64_t span = std::min(size - page, 1 + Rand(4 * kBlock));
    const bool write = Rand(2) == 0;
    Log(std::string(write ? "mmap_write " : "mmap_read ") + Name(f) + " " +
        std::to_string(span) + "@" + std::to_string(page));
    void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                   static_cast<off_t>(page));
    if (p == MAP_FAILED) return "mmap: " + ErrText(errno);
    char* c = static_cast<char*>(p);
    std::string err;
    if (write) {
      const uint64_t at = Rand(span);
      const std::string data =
          Data(std::min<uint64_t>(span - at, 1 + Rand(300)));
      std::memcpy(c + at, data.data(), data.size());
      if (msync(p, span, MS_SYNC) != 0) err = "msync: " + ErrText(errno);
      ModelWrite(f, page + at, data);
    } else {
      err = CompareAt(f, page, c, span, "mmap read");
    }
    munmap(p, span);
    return err;
  }

  std::string Fallocate(size_t f, int fd, uint64_t size) {
    static const int kModes[] = {
        0,
        FALLOC_FL_KEEP_SIZE,
        FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
        FALLOC_FL_ZERO_RANGE,
        FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
        FALLOC_FL_COLLAPSE_RANGE,
        FALLOC_FL_INSERT_RANGE,
    };
    const int mode = kModes[Rand(std::size(kModes))];
    const bool shift =
        mode == FALLOC_FL_COLLAPSE_RANGE || mode == FALLOC_FL_INSERT_RANGE;
    uint64_t off = Offset(o_.max_size);
    uint64_t len = Length();
    if (shift) {  // block-aligned, as ext4 requires
      off = size == 0 ? 0 : (Rand(size) / kBlock) * kBlock;
      len = (1 + Rand(8)) * kBlock;
    }
    Log("fallocate " + Name(f) + " mode=" + std::to_string(mode) + " " +
        std::to_string(len) + "@" + std::to_string(off));
    std::string& m = model_[f];
    const int r =
        fallocate(fd, mode, static_cast<off_t>(off), static_cast<off_t>(len));
    const int err = r == 0 ? 0 : errno;
    // What a plain file gives.
    int expect = 0;
    if (mode == FALLOC_FL_COLLAPSE_RANGE && off + len >= size) expect = EINVAL;
    if (mode == FALLOC_FL_INSERT_RANGE && off >= size) expect = EINVAL;
    if (shift && err == EOPNOTSUPP && o_.shifts_may_be_refused) {
      ++counts_["fallocate_shift_refused"];
      return "";
    }
    if (err != expect) {
      return "fallocate mode " + std::to_string(mode) + ": " +
             (err ? ErrText(err) : "ok") + ", expected " +
             (expect ? ErrText(expect) : "ok");
    }
    if (err != 0) return "";
    switch (mode) {
      case 0:
      case FALLOC_FL_ZERO_RANGE:
        if (m.size() < off + len) m.resize(off + len, '\0');
        if (mode == FALLOC_FL_ZERO_RANGE) {
          std::fill(m.begin() + off, m.begin() + off + len, '\0');
        }
        break;
      case FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE:
      case FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE:
        if (off < m.size()) {
          std::fill(m.begin() + off,
                    m.begin() + std::min<uint64_t>(m.size(), off + len), '\0');
        }
        break;
      case FALLOC_FL_COLLAPSE_RANGE:
        m.erase(off, len);
        break;
      case FALLOC_FL_INSERT_RANGE:
        m.insert(off, len, '\0');
        break;
      default:
        break;
    }
    return "";
  }

  std::string CopyRange(size_t dst) {
    const size_t src = Rand(fds_.size());
    const uint64_t src_size = model_[src].size();
    uint64_t in = Rand(src_size + 4096);
    uint64_t out = Offset(o_.max_size);
    uint64_t len = Length();
    if (src == dst) {
      // Within the file's size: a copy that extends the file while it
      // reads past the old end reads what it wrote itself.
      if (in >= src_size) in = src_size == 0 ? 0 : Rand(src_size);
      len = std::max<uint64_t>(1, std::min(len, src_size - in));
      // The kernel refuses overlapping ranges of one file.
      if (!(in + len <= out || out + len <= in)) out = in + len + Rand(4096);
    }
    Log("copy_file_range " + Name(src) + " " + std::to_string(len) + "@" +
        std::to_string(in) + " -> " + Name(dst) + "@" + std::to_string(out));
    const uint64_t want = in >= src_size ? 0 : std::min(len, src_size - in);
    const std::string bytes = want == 0 ? "" : model_[src].substr(in, want);
    loff_t off_in = static_cast<loff_t>(in), off_out = static_cast<loff_t>(out);
    uint64_t done = 0;
    while (done < len) {
      const ssize_t n = copy_file_range(fds_[src], &off_in, fds_[dst], &off_out,
                                        len - done, 0);
      if (n < 0) return "copy_file_range: " + ErrText(errno);
      if (n == 0) break;
      done += static_cast<uint64_t>(n);
    }
    if (done != want) {
      return "copy_file_range copied " + std::to_string(done) +
             " bytes, expected " + std::to_string(want);
    }
    if (want > 0) ModelWrite(dst, out, bytes);
    return "";
  }

  // SEEK_DATA / SEEK_HOLE answers that any correct file system may give:
  // data is never skipped, and a hole never holds data.
  std::string Seek(size_t f, int fd, uint64_t size) {
    const bool data = Rand(2) == 0;
    const uint64_t off = Rand(size + 4096);
    Log(std::string(data ? "seek_data " : "seek_hole ") + Name(f) + " " +
        std::to_string(off));
    const off_t r =
        lseek(fd, static_cast<off_t>(off), data ? SEEK_DATA : SEEK_HOLE);
    const int err = r < 0 ? errno : 0;
    const std::string& m = model_[f];
    auto zeros = [&](uint64_t a, uint64_t b) {
      for (uint64_t i = a; i < b && i < m.size(); ++i) {
        if (m[i] != '\0') return false;
      }
      return true;
    };
    if (off >= size) {
      if (err != ENXIO) return "seek past the end: expected ENXIO";
      return "";
    }
    if (data) {
      if (err == ENXIO) {
        if (!zeros(off, size)) return "SEEK_DATA said no data, but there is";
        return "";
      }
      if (err != 0) return "SEEK_DATA: " + ErrText(err);
      const auto at = static_cast<uint64_t>(r);
      if (at < off || at >= size) {
        return "SEEK_DATA gave " + std::to_string(at) + " outside [" +
               std::to_string(off) + ", " + std::to_string(size) + ")";
      }
      if (!zeros(off, at)) return "SEEK_DATA skipped data";
      return "";
    }
    if (err != 0) return "SEEK_HOLE: " + ErrText(err);
    const auto at = static_cast<uint64_t>(r);
    if (at < off || at > size) {
      return "SEEK_HOLE gave " + std::to_string(at) + " outside [" +
             std::to_string(off) + ", " + std::to_string(size) + "]";
    }
    if (at < size && m[at] != '\0') {
      return "SEEK_HOLE gave " + std::to_string(at) + ", which holds data";
    }
    return "";
  }

  const std::vector<std::string> paths_;
  const ExerciseOptions o_;
  std::mt19937_64 rng_;
  std::vector<std::string> model_;
  std::vector<int> fds_;
  uint64_t op_ = 0;
  std::deque<std::string> log_;
  std::map<std::string, uint64_t> counts_;
};

}  // namespace

ExerciseResult Exercise(const std::vector<std::string>& paths,
                        const ExerciseOptions& options) {
  Run run(paths, options);
  return run.Go();
}

std::string ReadAll(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

}  // namespace sroute::testing

// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: the table of POSIX scenarios, one entry each, that every
// parity variant runs whole.
#include "tests/integration/posix_scenarios.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/util/run_as.h"
#include "tests/util/sanitized.h"

namespace sroute::testing {

std::string ErrnoName(int err) {
  switch (err) {
    case 0:
      return "0";
    case EPERM:
      return "EPERM";
    case ENOENT:
      return "ENOENT";
    case ESRCH:
      return "ESRCH";
    case EINTR:
      return "EINTR";
    case EIO:
      return "EIO";
    case ENXIO:
      return "ENXIO";
    case E2BIG:
      return "E2BIG";
    case EBADF:
      return "EBADF";
    case EAGAIN:
      return "EAGAIN";
    case ENOMEM:
      return "ENOMEM";
    case EACCES:
      return "EACCES";
    case EFAULT:
      return "EFAULT";
    case EBUSY:
      return "EBUSY";
    case EEXIST:
      return "EEXIST";
    case EXDEV:
      return "EXDEV";
    case ENODEV:
      return "ENODEV";
    case ENOTDIR:
      return "ENOTDIR";
    case EISDIR:
      return "EISDIR";
    case EINVAL:
      return "EINVAL";
    case ENFILE:
      return "ENFILE";
    case EMFILE:
      return "EMFILE";
    case ETXTBSY:
      return "ETXTBSY";
    case EFBIG:
      return "EFBIG";
    case ENOSPC:
      return "ENOSPC";
    case ESPIPE:
      return "ESPIPE";
    case EROFS:
      return "EROFS";
    case EMLINK:
      return "EMLINK";
    case EPIPE:
      return "EPIPE";
    case ERANGE:
      return "ERANGE";
    case EDEADLK:
      return "EDEADLK";
    case ENAMETOOLONG:
      return "ENAMETOOLONG";
    case ENOLCK:
      return "ENOLCK";
    case ENOSYS:
      return "ENOSYS";
    case ENOTEMPTY:
      return "ENOTEMPTY";
    case ELOOP:
      return "ELOOP";
    case ENODATA:
      return "ENODATA";
    case EOVERFLOW:
      return "EOVERFLOW";
    case EOPNOTSUPP:  // == ENOTSUP on Linux
      return "EOPNOTSUPP";
    case ENOTCONN:
      return "ENOTCONN";
    case ETIMEDOUT:
      return "ETIMEDOUT";
    case ESTALE:
      return "ESTALE";
    case EDQUOT:
      return "EDQUOT";
    case ECANCELED:
      return "ECANCELED";
    case ENOTTY:
      return "ENOTTY";
    case ENOTSOCK:
      return "ENOTSOCK";
    default:
      return "E" + std::to_string(err);
  }
}

namespace {

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;
constexpr int64_t kGiB = 1024 * kMiB;

// Expectation for Log::Step: kOk (success), an errno value, or kAny.
constexpr int kOk = 0;
constexpr int kAny = -1;

std::string Fmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  const int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0) return "<format error>";
  if (static_cast<size_t>(n) < sizeof(buf)) return std::string(buf, n);
  std::string out(n + 1, '\0');
  va_start(ap, fmt);
  vsnprintf(out.data(), out.size(), fmt, ap);
  va_end(ap);
  out.resize(n);
  return out;
}

uint32_t Crc32(const void* data, size_t len, uint32_t crc = 0) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < len; ++i)
    crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t Crc32(const std::string& s) { return Crc32(s.data(), s.size()); }

std::string Summary(const std::string& data) {
  return Fmt("%zu bytes crc=0x%08x", data.size(), Crc32(data));
}

// Deterministic bytes: the byte at absolute file offset `off` for `seed`.
// Never periodic with a power-of-two period, so misplaced blocks show up.
char PatternByte(uint32_t seed, uint64_t off) {
  uint64_t x = off * 0x9E3779B97F4A7C15ull ^ (seed + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  return static_cast<char>(x >> 56);
}

std::string Pattern(uint32_t seed, uint64_t off, size_t len) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; ++i) s[i] = PatternByte(seed, off + i);
  return s;
}

bool AllZero(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == 0; });
}

std::string JoinNames(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) {
    if (!out.empty()) out += ",";
    out += s;
  }
  return out.empty() ? "<none>" : out;
}

std::string ModeStr(mode_t m) { return Fmt("0%o", static_cast<unsigned>(m)); }

// Only what any correct passthrough must preserve: no inode, device, block
// count or times. Directory size and link count vary between file systems.
std::string StatStr(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "mode=" + ModeStr(st.st_mode);
  return Fmt("size=%lld mode=%s nlink=%lu", static_cast<long long>(st.st_size),
             ModeStr(st.st_mode).c_str(),
             static_cast<unsigned long>(st.st_nlink));
}

std::string TimeStr(const struct timespec& ts) {
  return Fmt("%lld.%09ld", static_cast<long long>(ts.tv_sec), ts.tv_nsec);
}

// A syscall result with its errno captured right after the call:
// R(open(...)) runs the call and reads errno before anything else can run.
struct Res {
  int64_t rc;
  int err;
};

template <typename T>
Res R(T rc) {
  Res r{static_cast<int64_t>(rc), 0};
  if (r.rc < 0) r.err = errno;
  return r;
}

Res RPtr(const void* p, const void* failed) {
  Res r{0, 0};
  if (p == failed) r = Res{-1, errno};
  return r;
}

// Builds a transcript. Paths in lines are always relative to the root.
class Log {
 public:
  explicit Log(std::string root) : root_(std::move(root)) {}

  std::string P(const std::string& rel) const {
    return rel.empty() ? root_ : root_ + "/" + rel;
  }
  const char* C(const std::string& rel) {
    // Keeps the string alive until the next call; for single syscalls only.
    scratch_[next_scratch_] = P(rel);
    const char* p = scratch_[next_scratch_].c_str();
    next_scratch_ = (next_scratch_ + 1) % scratch_.size();
    return p;
  }

  // Long names (over 200 bytes) are shown as "<first char>*<length>".
  static std::string Short(const std::string& rel) {
    if (rel.size() <= 200) return rel.empty() ? "." : rel;
    return Fmt("%c*%zu", rel[0], rel.size());
  }

  void Line(const std::string& s) {
    out_ += s;
    out_ += '\n';
  }

  // "desc: ok_text" on success, "desc: ENAME" on failure; appends
  // " UNEXPECTED(...)" when the outcome is not `want` (kOk, an errno or
  // kAny). Returns whether the call succeeded.
  bool Step(const std::string& desc, Res r, int want = kOk,
            const std::string& ok_text = "ok") {
    std::string line = desc + ": ";
    line += r.rc >= 0 ? ok_text : ErrnoName(r.err);
    if (want != kAny) {
      if (want == kOk && r.rc < 0) {
        line += " UNEXPECTED(want ok)";
      } else if (want != kOk && (r.rc >= 0 || r.err != want)) {
        line += " UNEXPECTED(want " + ErrnoName(want) + ")";
      }
    }
    Line(line);
    return r.rc >= 0;
  }

  // Prints the returned number; UNEXPECTED unless it equals `want_value`.
  bool Num(const std::string& desc, Res r, int64_t want_value) {
    std::string text = std::to_string(r.rc);
    if (r.rc >= 0 && r.rc != want_value) {
      text += " UNEXPECTED(want " + std::to_string(want_value) + ")";
    }
    return Step(desc, r, kOk, text);
  }

  // Prints the returned number with no expectation about it.
  bool AnyNum(const std::string& desc, Res r) {
    return Step(desc, r, kAny, std::to_string(r.rc));
  }

  // "desc: yes" or "desc: no UNEXPECTED".
  void Expect(const std::string& desc, bool ok) {
    Line(desc + (ok ? ": yes" : ": no UNEXPECTED"));
  }

  bool Stat(const std::string& rel, int want = kOk,
            struct stat* out = nullptr) {
    struct stat st {};
    const Res r = R(::stat(C(rel), &st));
    if (out != nullptr) *out = st;
    return Step("stat(" + Short(rel) + ")", r, want, StatStr(st));
  }
  bool Lstat(const std::string& rel, int want = kOk,
             struct stat* out = nullptr) {
    struct stat st {};
    const Res r = R(::lstat(C(rel), &st));
    if (out != nullptr) *out = st;
    return Step("lstat(" + rel + ")", r, want, StatStr(st));
  }
  bool Fstat(int fd, const std::string& name, struct stat* out = nullptr) {
    struct stat st {};
    const Res r = R(::fstat(fd, &st));
    if (out != nullptr) *out = st;
    return Step("fstat(" + name + ")", r, kOk, StatStr(st));
  }

  int Open(const std::string& rel, int flags, const std::string& flag_text,
           int want = kOk, mode_t mode = 0644) {
    const Res r = R(::open(C(rel), flags | O_CLOEXEC, mode));
    Step("open(" + Short(rel) + ", " + flag_text + ")", r, want);
    if (want != kOk && r.rc >= 0) {  // unexpectedly opened: don't leak it
      ::close(static_cast<int>(r.rc));
      return -1;
    }
    return static_cast<int>(r.rc);
  }
  void Close(int fd, const std::string& name) {
    if (fd < 0) return;
    Step("close(" + name + ")", R(::close(fd)));
  }

  // Writes all of `data` at `off`; prints the byte count.
  bool Pwrite(int fd, const std::string& name, const std::string& data,
              int64_t off) {
    const Res r = R(::pwrite(fd, data.data(), data.size(), off));
    return Num(Fmt("pwrite(%s, %zu@%lld)", name.c_str(), data.size(),
                   static_cast<long long>(off)),
               r, static_cast<int64_t>(data.size()));
  }
  bool Write(int fd, const std::string& name, const std::string& data) {
    const Res r = R(::write(fd, data.data(), data.size()));
    return Num(Fmt("write(%s, %zu)", name.c_str(), data.size()), r,
               static_cast<int64_t>(data.size()));
  }

  // Reads up to `len` bytes at `off` (looping over short reads until EOF)
  // and prints the size and crc; UNEXPECTED unless it equals `expect`.
  std::string Pread(int fd, const std::string& name, size_t len, int64_t off,
                    const std::string* expect = nullptr) {
    std::string buf(len, '\0');
    size_t got = 0;
    Res r{0, 0};
    while (got < len) {
      r = R(::pread(fd, buf.data() + got, len - got, off + got));
      if (r.rc <= 0) break;
      got += r.rc;
    }
    buf.resize(got);
    std::string text = Summary(buf);
    if (r.rc >= 0 && expect != nullptr && buf != *expect) {
      text += " UNEXPECTED(want " + Summary(*expect) + ")";
    }
    Step(Fmt("pread(%s, %zu@%lld)", name.c_str(), len,
             static_cast<long long>(off)),
         r.rc < 0 ? r : Res{0, 0}, kOk, text);
    return buf;
  }
  std::string Pread(int fd, const std::string& name, size_t len, int64_t off,
                    const std::string& expect) {
    return Pread(fd, name, len, off, &expect);
  }

  // Creates `rel` holding `data` (O_CREAT|O_TRUNC), in one line.
  bool MakeFile(const std::string& rel, const std::string& data) {
    const int fd =
        ::open(C(rel), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return Step("mkfile(" + rel + ")", Res{-1, errno});
    const ssize_t n = ::pwrite(fd, data.data(), data.size(), 0);
    const int err = errno;
    const int rc = ::close(fd);
    const int close_err = errno;
    if (n != static_cast<ssize_t>(data.size())) {
      return Step("mkfile(" + rel + ")", Res{-1, n < 0 ? err : EIO});
    }
    return Step(Fmt("mkfile(%s, %zu)", rel.c_str(), data.size()),
                rc < 0 ? Res{-1, close_err} : Res{0, 0});
  }

  // Reads the whole file by path; "<ENAME>" on failure.
  std::string Slurp(const std::string& rel, int* err = nullptr) {
    const int fd = ::open(C(rel), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      if (err != nullptr) *err = errno;
      return "<" + ErrnoName(errno) + ">";
    }
    std::string out;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (err != nullptr) *err = errno;
        out = "<" + ErrnoName(errno) + ">";
        break;
      }
      if (n == 0) break;
      out.append(buf, n);
    }
    ::close(fd);
    return out;
  }
  // "content(rel): N bytes crc=..."; UNEXPECTED unless it equals `expect`.
  void Content(const std::string& rel, const std::string& expect) {
    int err = 0;
    const std::string got = Slurp(rel, &err);
    if (err != 0) {
      Step("content(" + rel + ")", Res{-1, err});
      return;
    }
    std::string text = Summary(got);
    if (got.size() <= 32 && std::all_of(got.begin(), got.end(), [](char c) {
          return c >= 0x20 && c < 0x7f;
        })) {
      text += " \"" + got + "\"";
    }
    if (got != expect) text += " UNEXPECTED(want " + Summary(expect) + ")";
    Line("content(" + rel + "): " + text);
  }

  // Sorted names in a directory, without "." and "..".
  std::vector<std::string> List(const std::string& rel, Res* res = nullptr) {
    std::vector<std::string> names;
    DIR* d = ::opendir(C(rel));
    if (d == nullptr) {
      if (res != nullptr) *res = Res{-1, errno};
      return names;
    }
    Res r{0, 0};
    for (;;) {
      errno = 0;
      const dirent* e = ::readdir(d);
      if (e == nullptr) {
        if (errno != 0) r = Res{-1, errno};
        break;
      }
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    if (res != nullptr) *res = r;
    return names;
  }
  void PrintList(const std::string& rel) {
    Res r{0, 0};
    const std::vector<std::string> names = List(rel, &r);
    Step("list(" + (rel.empty() ? std::string(".") : rel) + ")", r, kOk,
         JoinNames(names));
  }

  const std::string& str() const { return out_; }

 private:
  std::string root_;
  std::string out_;
  std::array<std::string, 4> scratch_;
  size_t next_scratch_ = 0;
};

// 1. open/create flags.
std::string OpenFlags(const std::string& root) {
  Log L(root);
  int fd = L.Open("a", O_CREAT | O_EXCL | O_WRONLY, "O_CREAT|O_EXCL|O_WRONLY");
  L.Write(fd, "a", "hello world");
  L.Close(fd, "a");
  L.Open("a", O_CREAT | O_EXCL | O_WRONLY, "O_CREAT|O_EXCL|O_WRONLY", EEXIST);
  L.Stat("a");
  // O_CREAT without O_EXCL on an existing file keeps it.
  fd = L.Open("a", O_CREAT | O_RDWR, "O_CREAT|O_RDWR");
  L.Fstat(fd, "a");
  L.Close(fd, "a");
  // O_TRUNC empties a file with data.
  fd = L.Open("a", O_WRONLY | O_TRUNC, "O_WRONLY|O_TRUNC");
  L.Fstat(fd, "a");
  L.Close(fd, "a");
  L.Stat("a");
  // O_APPEND writes land at the end whatever the file offset.
  fd = L.Open("b", O_CREAT | O_WRONLY | O_APPEND, "O_CREAT|O_WRONLY|O_APPEND");
  L.Write(fd, "b", "0123456789");
  L.Num("lseek(b, 0, SEEK_SET)", R(::lseek(fd, 0, SEEK_SET)), 0);
  L.Write(fd, "b", "abc");
  L.Num("lseek(b, 0, SEEK_CUR)", R(::lseek(fd, 0, SEEK_CUR)), 13);
  // Linux appends even for pwrite on an O_APPEND descriptor (pwrite(2) BUGS).
  L.Pwrite(fd, "b", "XY", 0);
  L.Fstat(fd, "b");
  L.Close(fd, "b");
  L.Content("b", "0123456789abcXY");
  // O_APPEND|O_TRUNC on open.
  fd = L.Open("b", O_WRONLY | O_APPEND | O_TRUNC, "O_WRONLY|O_APPEND|O_TRUNC");
  L.Write(fd, "b", "z");
  L.Close(fd, "b");
  L.Content("b", "z");
  // Access mode is enforced per descriptor.
  fd = L.Open("b", O_RDONLY, "O_RDONLY");
  L.Step("write(b via O_RDONLY)", R(::write(fd, "x", 1)), EBADF);
  L.Step("pwrite(b via O_RDONLY)", R(::pwrite(fd, "x", 1, 0)), EBADF);
  L.Close(fd, "b");
  fd = L.Open("b", O_WRONLY, "O_WRONLY");
  char c;
  L.Step("read(b via O_WRONLY)", R(::read(fd, &c, 1)), EBADF);
  L.Close(fd, "b");
  // Missing files and parents.
  L.Open("missing", O_RDONLY, "O_RDONLY", ENOENT);
  L.Open("missing", O_WRONLY, "O_WRONLY", ENOENT);
  L.Open("nodir/x", O_CREAT | O_WRONLY, "O_CREAT|O_WRONLY", ENOENT);
  L.Open("b/x", O_RDONLY, "O_RDONLY", ENOTDIR);
  L.Open("b/x", O_CREAT | O_WRONLY, "O_CREAT|O_WRONLY", ENOTDIR);
  // Directories.
  L.Step("mkdir(d)", R(::mkdir(L.C("d"), 0755)));
  L.Open("d", O_WRONLY, "O_WRONLY", EISDIR);
  L.Open("d", O_RDWR, "O_RDWR", EISDIR);
  L.Open("d", O_CREAT | O_WRONLY, "O_CREAT|O_WRONLY", EISDIR);
  L.Open("d", O_CREAT | O_EXCL | O_WRONLY, "O_CREAT|O_EXCL|O_WRONLY", EEXIST);
  fd = L.Open("d", O_RDONLY | O_DIRECTORY, "O_RDONLY|O_DIRECTORY");
  L.Step("read(d)", R(::read(fd, &c, 1)), EISDIR);
  L.Close(fd, "d");
  L.Open("b", O_RDONLY | O_DIRECTORY, "O_RDONLY|O_DIRECTORY", ENOTDIR);
  L.Open("a", O_RDONLY | O_DIRECTORY, "O_RDONLY|O_DIRECTORY", ENOTDIR);
  L.Open("b/", O_RDONLY, "O_RDONLY (trailing slash)", ENOTDIR);
  // Creating with an explicit mode.
  fd = L.Open("c", O_CREAT | O_EXCL | O_RDWR, "O_CREAT|O_EXCL|O_RDWR 0600", kOk,
              0600);
  L.Fstat(fd, "c");
  L.Close(fd, "c");
  L.PrintList("");
  return L.str();
}

// 2. pread/pwrite at assorted offsets, checked against an in-memory model.
std::string PreadPwrite(const std::string& root) {
  Log L(root);
  const int fd = L.Open("f", O_CREAT | O_RDWR, "O_CREAT|O_RDWR");
  std::string model;
  auto put = [&](int64_t off, size_t len, uint32_t seed) {
    const std::string data = Pattern(seed, off, len);
    L.Pwrite(fd, "f", data, off);
    if (model.size() < off + len) model.resize(off + len, '\0');
    model.replace(off, len, data);
  };
  put(0, 100, 1);
  put(1, 10, 2);
  put(4095, 2, 3);
  put(4096, 4096, 4);
  put(1 * kMiB + 3, 5000, 5);
  put(8190, 8, 6);  // crosses 8192
  put(50, 0, 7);    // zero-length write
  struct stat st {};
  L.Fstat(fd, "f", &st);
  L.Expect("size matches model",
           st.st_size == static_cast<off_t>(model.size()));
  for (int64_t off :
       {int64_t{0}, int64_t{1}, int64_t{4095}, int64_t{4096}, 1 * kMiB + 3}) {
    for (size_t len : {size_t{1}, size_t{4096}}) {
      L.Pread(fd, "f", len, off, model.substr(off, len));
    }
  }
  // Everything, and a hole between the writes reads as zeros.
  L.Pread(fd, "f", model.size(), 0, model);
  const std::string hole =
      L.Pread(fd, "f", 65536, 16384, model.substr(16384, 65536));
  L.Expect("hole reads zeros", AllZero(hole));
  // Short read at EOF, and reads at or past EOF return 0.
  const int64_t size = static_cast<int64_t>(model.size());
  {
    char buf[4096];
    L.Num("pread(f, 4096@size-100)",
          R(::pread(fd, buf, sizeof(buf), size - 100)), 100);
    L.Expect("short read data",
             std::string(buf, 100) == model.substr(size - 100));
    L.Num("pread(f, 4096@size)", R(::pread(fd, buf, sizeof(buf), size)), 0);
    L.Num("pread(f, 4096@size+12345)",
          R(::pread(fd, buf, sizeof(buf), size + 12345)), 0);
    // read() from the file offset.
    L.Num("lseek(f, -10, SEEK_END)", R(::lseek(fd, -10, SEEK_END)), size - 10);
    L.Num("read(f, 4096)", R(::read(fd, buf, sizeof(buf))), 10);
    L.Expect("read data", std::string(buf, 10) == model.substr(size - 10));
    L.Num("read(f, 4096) at EOF", R(::read(fd, buf, sizeof(buf))), 0);
    L.Step("pread(f, 1@-1)", R(::pread(fd, buf, 1, -1)), EINVAL);
  }
  // Overwrite in the middle doesn't change the size.
  put(2000, 300, 8);
  L.Fstat(fd, "f", &st);
  L.Expect("size unchanged", st.st_size == size);
  L.Close(fd, "f");
  L.Content("f", model);
  return L.str();
}

// 3. Sparse files past 4 GiB.
std::string SparseFile(const std::string& root) {
  Log L(root);
  const int fd = L.Open("s", O_CREAT | O_RDWR, "O_CREAT|O_RDWR");
  const int64_t five = 5 * kGiB;
  L.Pwrite(fd, "s", "X", five);
  struct stat st {};
  L.Fstat(fd, "s", &st);
  L.Stat("s");
  L.Line(std::string("sparse(blocks<size/512): ") +
         (st.st_blocks < st.st_size / 512 ? "yes" : "no"));
  const std::string zeros(4096, '\0');
  L.Line("crc of 4096 zeros: " + Summary(zeros));
  L.Pread(fd, "s", 4096, 0, zeros);
  L.Pread(fd, "s", 4096, 4 * kGiB - 2048, zeros);
  L.Pread(fd, "s", 4096, five - 4096, zeros);
  L.Pread(fd, "s", 4096, five - 4095, std::string(4095, '\0') + "X");
  L.Pread(fd, "s", 10, five, std::string("X"));
  L.Pread(fd, "s", 10, five + 1, std::string());
  L.Num("lseek(s, 0, SEEK_END)", R(::lseek(fd, 0, SEEK_END)), five + 1);
  // SEEK_DATA/SEEK_HOLE from 0 are file-system dependent (a file system may
  // report the whole file as data: FUSE without an lseek handler does), but
  // deterministic for a given one; past EOF Linux mandates ENXIO.
  L.AnyNum("lseek(s, 0, SEEK_DATA)", R(::lseek(fd, 0, SEEK_DATA)));
  L.AnyNum("lseek(s, 0, SEEK_HOLE)", R(::lseek(fd, 0, SEEK_HOLE)));
  // The byte at 5 GiB is data and the only hole after it is the one at EOF.
  L.Num("lseek(s, 5GiB, SEEK_DATA)", R(::lseek(fd, five, SEEK_DATA)), five);
  L.Num("lseek(s, 5GiB, SEEK_HOLE)", R(::lseek(fd, five, SEEK_HOLE)), five + 1);
  L.Step("lseek(s, 5GiB+1, SEEK_DATA)", R(::lseek(fd, five + 1, SEEK_DATA)),
         ENXIO);
  L.Step("lseek(s, 6GiB, SEEK_HOLE)", R(::lseek(fd, 6 * kGiB, SEEK_HOLE)),
         ENXIO);
  // A write straddling the 4 GiB boundary (32-bit offset wrap).
  const std::string straddle = Pattern(9, 4 * kGiB - 3, 7);
  L.Pwrite(fd, "s", straddle, 4 * kGiB - 3);
  L.Pread(fd, "s", 7, 4 * kGiB - 3, straddle);
  L.Pread(fd, "s", 4, 3, std::string(4, '\0'));  // the low offset is untouched
  L.Pread(fd, "s", 16, 4 * kGiB - 8,
          std::string(5, '\0') + straddle + std::string(4, '\0'));
  L.Fstat(fd, "s");
  // Shrink to 1 byte: the high data is gone.
  L.Step("ftruncate(s, 1)", R(::ftruncate(fd, 1)));
  L.Fstat(fd, "s");
  L.Pread(fd, "s", 10, 0, std::string(1, '\0'));
  L.Step("ftruncate(s, 5GiB)", R(::ftruncate(fd, five)));
  L.Pread(fd, "s", 4096, five - 4096, zeros);
  L.Fstat(fd, "s");
  L.Close(fd, "s");
  return L.str();
}

// 4. truncate up and down, by descriptor and by path.
std::string Truncate(const std::string& root) {
  Log L(root);
  const std::string data = Pattern(11, 0, 10000);
  L.MakeFile("t", data);
  int fd = L.Open("t", O_RDWR, "O_RDWR");
  L.Step("ftruncate(t, 5000)", R(::ftruncate(fd, 5000)));
  L.Fstat(fd, "t");
  L.Pread(fd, "t", 10000, 0, data.substr(0, 5000));
  L.Step("ftruncate(t, 20000)", R(::ftruncate(fd, 20000)));
  L.Fstat(fd, "t");
  L.Pread(fd, "t", 5000, 0, data.substr(0, 5000));
  L.Pread(fd, "t", 15000, 5000, std::string(15000, '\0'));
  L.Close(fd, "t");
  L.Step("truncate(t, 100)", R(::truncate(L.C("t"), 100)));
  L.Stat("t");
  L.Step("truncate(t, 8197)", R(::truncate(L.C("t"), 8197)));
  L.Stat("t");
  L.Content("t", data.substr(0, 100) + std::string(8097, '\0'));
  L.Step("truncate(t, 0)", R(::truncate(L.C("t"), 0)));
  L.Stat("t");
  // Truncating up then writing past it.
  fd = L.Open("t", O_RDWR, "O_RDWR");
  L.Step("ftruncate(t, 4096)", R(::ftruncate(fd, 4096)));
  L.Pwrite(fd, "t", "tail", 4096);
  L.Fstat(fd, "t");
  L.Pread(fd, "t", 8192, 0, std::string(4096, '\0') + "tail");
  // Same size: nothing changes.
  L.Step("ftruncate(t, 4100)", R(::ftruncate(fd, 4100)));
  L.Fstat(fd, "t");
  L.Step("ftruncate(t, -1)", R(::ftruncate(fd, -1)), EINVAL);
  L.Close(fd, "t");
  fd = L.Open("t", O_RDONLY, "O_RDONLY");
  L.Step("ftruncate(t via O_RDONLY, 0)", R(::ftruncate(fd, 0)), EINVAL);
  L.Close(fd, "t");
  L.Stat("t");
  L.Step("truncate(missing, 0)", R(::truncate(L.C("missing"), 0)), ENOENT);
  L.Step("mkdir(d)", R(::mkdir(L.C("d"), 0755)));
  L.Step("truncate(d, 0)", R(::truncate(L.C("d"), 0)), EISDIR);
  // Truncation seen through another descriptor.
  fd = L.Open("t", O_RDWR, "O_RDWR");
  const int fd2 = L.Open("t", O_RDONLY, "O_RDONLY");
  L.Step("ftruncate(t, 10)", R(::ftruncate(fd, 10)));
  L.Fstat(fd2, "t (second fd)");
  L.Pread(fd2, "t (second fd)", 100, 0, std::string(10, '\0'));
  L.Close(fd2, "t");
  L.Close(fd, "t");
  return L.str();
}

// 5. rename and renameat2.
std::string Rename(const std::string& root) {
  Log L(root);
  auto mkdir = [&](const std::string& rel) {
    L.Step("mkdir(" + rel + ")", R(::mkdir(L.C(rel), 0755)));
  };
  auto rename = [&](const std::string& from, const std::string& to, int want) {
    L.Step("rename(" + from + ", " + to + ")", R(::rename(L.C(from), L.C(to))),
           want);
  };
  auto rename2 = [&](const std::string& from, const std::string& to,
                     unsigned flags, const std::string& flag_text, int want) {
    L.Step("renameat2(" + from + ", " + to + ", " + flag_text + ")",
           R(::renameat2(AT_FDCWD, L.C(from), AT_FDCWD, L.C(to), flags)), want);
  };
  // Each case uses its own names so that one failure does not cascade.
  // File over an existing file.
  L.MakeFile("a", "AAA");
  L.MakeFile("b", "BBBBB");
  rename("a", "b", kOk);
  L.Stat("a", ENOENT);
  L.Stat("b");
  L.Content("b", "AAA");
  // Rename to a new name, a missing source, and to itself.
  L.MakeFile("c", "CC");
  rename("c", "c2", kOk);
  rename("c", "c3", ENOENT);
  rename("c2", "c2", kOk);
  L.Content("c2", "CC");
  // A file open across the rename keeps working.
  L.MakeFile("o", "OOO");
  int fd = L.Open("o", O_RDWR, "O_RDWR");
  rename("o", "o2", kOk);
  L.Pwrite(fd, "o2", "Z", 3);
  L.Close(fd, "o2");
  L.Content("o2", "OOOZ");
  // Directory over an empty directory.
  mkdir("d1");
  L.MakeFile("d1/x", "x");
  mkdir("d2");
  rename("d1", "d2", kOk);
  L.Stat("d1", ENOENT);
  L.Content("d2/x", "x");
  // Directory over a non-empty directory.
  mkdir("d3");
  L.MakeFile("d3/y", "y");
  mkdir("d4");
  L.MakeFile("d4/z", "z");
  rename("d3", "d4", ENOTEMPTY);
  L.Content("d3/y", "y");
  L.Content("d4/z", "z");
  // File over a directory, directory over a file.
  L.MakeFile("f5", "F5");
  mkdir("d5");
  rename("f5", "d5", EISDIR);
  rename("d5", "f5", ENOTDIR);
  L.Content("f5", "F5");
  L.Stat("d5");
  // Move into and out of a subdirectory.
  L.MakeFile("m", "M");
  mkdir("md");
  rename("m", "md/m", kOk);
  L.PrintList("md");
  rename("md/m", "m2", kOk);
  L.Content("m2", "M");
  // renameat2 RENAME_NOREPLACE.
  L.MakeFile("n1", "N1");
  L.MakeFile("n2", "N2");
  rename2("n1", "n2", RENAME_NOREPLACE, "RENAME_NOREPLACE", EEXIST);
  L.Content("n1", "N1");
  L.Content("n2", "N2");
  rename2("n1", "n3", RENAME_NOREPLACE, "RENAME_NOREPLACE", kOk);
  L.Stat("n1", ENOENT);
  L.Content("n3", "N1");
  // RENAME_EXCHANGE swaps two files, and a file with a directory.
  L.MakeFile("x1", "X1");
  L.MakeFile("x2", "X2 longer");
  rename2("x1", "x2", RENAME_EXCHANGE, "RENAME_EXCHANGE", kOk);
  L.Content("x1", "X2 longer");
  L.Content("x2", "X1");
  L.MakeFile("xf", "XF");
  mkdir("xd");
  L.MakeFile("xd/inner", "inner");
  rename2("xf", "xd", RENAME_EXCHANGE, "RENAME_EXCHANGE", kOk);
  L.Content("xd", "XF");
  L.Content("xf/inner", "inner");
  rename2("x1", "missing", RENAME_EXCHANGE, "RENAME_EXCHANGE", ENOENT);
  rename2("x1", "x2", RENAME_EXCHANGE | RENAME_NOREPLACE,
          "RENAME_EXCHANGE|RENAME_NOREPLACE", EINVAL);
  // A directory into a subdirectory of itself.
  mkdir("p");
  mkdir("p/q");
  rename("p", "p/q/p", EINVAL);
  rename("p", "p/p", EINVAL);
  rename("p/q", "p/q/r", EINVAL);
  L.PrintList("p");
  // Two names of one file: rename is a no-op and both remain.
  L.MakeFile("l1", "L");
  L.Step("link(l1, l2)", R(::link(L.C("l1"), L.C("l2"))));
  rename("l1", "l2", kOk);
  L.Stat("l1");
  L.Stat("l2");
  // A missing target directory, a file as a directory, and ".".
  rename("m2", "nodir/m2", ENOENT);
  rename("m2", "f5/m2", ENOTDIR);
  rename("p/.", "r", kAny);
  L.PrintList("");
  return L.str();
}

// 6. An unlinked file stays usable through an open descriptor.
std::string UnlinkOpen(const std::string& root) {
  Log L(root);
  const std::string data = Pattern(21, 0, 10000);
  L.MakeFile("u", data);
  const int fd = L.Open("u", O_RDWR, "O_RDWR");
  const int fd2 = L.Open("u", O_RDONLY, "O_RDONLY");
  L.Step("unlink(u)", R(::unlink(L.C("u"))));
  L.Stat("u", ENOENT);
  L.Open("u", O_RDONLY, "O_RDONLY", ENOENT);
  struct stat st {};
  L.Fstat(fd, "u", &st);
  L.Expect("fstat nlink==0", st.st_nlink == 0);
  L.PrintList("");
  L.Pread(fd, "u", 10000, 0, data);
  L.Pwrite(fd, "u", "new data", 10000);
  L.Pread(fd2, "u (second fd)", 20000, 0, data + "new data");
  L.Step("ftruncate(u, 100)", R(::ftruncate(fd, 100)));
  L.Fstat(fd2, "u (second fd)");
  L.Pread(fd2, "u (second fd)", 20000, 0, data.substr(0, 100));
  // A new file under the old name is a different file.
  L.MakeFile("u", "fresh");
  L.Content("u", "fresh");
  L.Pread(fd, "u (old fd)", 200, 0, data.substr(0, 100));
  L.Close(fd, "u");
  L.Pread(fd2, "u (second fd)", 200, 0, data.substr(0, 100));
  L.Close(fd2, "u");
  L.Content("u", "fresh");
  L.Step("unlink(u)", R(::unlink(L.C("u"))));
  L.Step("unlink(u)", R(::unlink(L.C("u"))), ENOENT);
  L.PrintList("");
  return L.str();
}

// 7. Hard links.
std::string HardLinks(const std::string& root) {
  Log L(root);
  L.MakeFile("h1", "one");
  L.Step("link(h1, h2)", R(::link(L.C("h1"), L.C("h2"))));
  L.Stat("h1");
  L.Stat("h2");
  struct stat a {
  }, b{};
  ::stat(L.C("h1"), &a);
  ::stat(L.C("h2"), &b);
  L.Expect("same inode", a.st_ino == b.st_ino && a.st_dev == b.st_dev);
  int fd = L.Open("h1", O_WRONLY | O_APPEND, "O_WRONLY|O_APPEND");
  L.Write(fd, "h1", " two");
  L.Close(fd, "h1");
  L.Content("h2", "one two");
  fd = L.Open("h2", O_RDWR, "O_RDWR");
  L.Pwrite(fd, "h2", "ONE", 0);
  L.Fstat(fd, "h2");
  L.Close(fd, "h2");
  L.Content("h1", "ONE two");
  L.Step("link(h2, h3)", R(::link(L.C("h2"), L.C("h3"))));
  L.Stat("h1");
  L.Step("unlink(h1)", R(::unlink(L.C("h1"))));
  L.Stat("h1", ENOENT);
  L.Stat("h2");
  L.Content("h3", "ONE two");
  L.Step("mkdir(d)", R(::mkdir(L.C("d"), 0755)));
  L.Step("link(d, dl)", R(::link(L.C("d"), L.C("dl"))), EPERM);
  L.Step("link(h2, h3)", R(::link(L.C("h2"), L.C("h3"))), EEXIST);
  L.Step("link(h2, d)", R(::link(L.C("h2"), L.C("d"))), EEXIST);
  L.Step("link(missing, x)", R(::link(L.C("missing"), L.C("x"))), ENOENT);
  L.Step("link(h2, nodir/x)", R(::link(L.C("h2"), L.C("nodir/x"))), ENOENT);
  // Link into a subdirectory, then chmod through one name shows on the other.
  L.Step("link(h2, d/h4)", R(::link(L.C("h2"), L.C("d/h4"))));
  L.Step("chmod(d/h4, 0600)", R(::chmod(L.C("d/h4"), 0600)));
  L.Stat("h2");
  L.Stat("h3");
  L.Stat("d/h4");
  // Truncate through one name.
  L.Step("truncate(h3, 3)", R(::truncate(L.C("h3"), 3)));
  L.Content("h2", "ONE");
  L.Content("d/h4", "ONE");
  // Link of an open-and-unlinked file's last name: the others remain.
  L.Step("unlink(h2)", R(::unlink(L.C("h2"))));
  L.Step("unlink(h3)", R(::unlink(L.C("h3"))));
  L.Stat("d/h4");
  L.PrintList("");
  L.PrintList("d");
  return L.str();
}

// 8. Symbolic links.
std::string Symlinks(const std::string& root) {
  Log L(root);
  auto readlink = [&](const std::string& rel, int want) {
    char buf[256];
    const Res r = R(::readlink(L.C(rel), buf, sizeof(buf)));
    L.Step("readlink(" + rel + ")", r, want,
           "\"" + std::string(buf, r.rc > 0 ? r.rc : 0) + "\"");
  };
  L.MakeFile("target", "target data");
  L.Step("symlink(target, ln)", R(::symlink("target", L.C("ln"))));
  readlink("ln", kOk);
  struct stat st {};
  L.Lstat("ln", kOk, &st);
  L.Expect("lstat S_ISLNK", S_ISLNK(st.st_mode));
  L.Stat("ln", kOk, &st);
  L.Expect("stat S_ISREG", S_ISREG(st.st_mode));
  L.Content("ln", "target data");
  readlink("target", EINVAL);
  readlink("missing", ENOENT);
  L.Step("symlink(x, ln)", R(::symlink("x", L.C("ln"))), EEXIST);
  // Dangling link.
  L.Step("symlink(nowhere, dangling)",
         R(::symlink("nowhere", L.C("dangling"))));
  L.Stat("dangling", ENOENT);
  L.Lstat("dangling");
  readlink("dangling", kOk);
  L.Open("dangling", O_RDONLY, "O_RDONLY", ENOENT);
  // O_NOFOLLOW.
  L.Open("ln", O_RDONLY | O_NOFOLLOW, "O_RDONLY|O_NOFOLLOW", ELOOP);
  L.Close(L.Open("target", O_RDONLY | O_NOFOLLOW, "O_RDONLY|O_NOFOLLOW"),
          "target");
  // O_CREAT through a dangling link creates its target; O_EXCL refuses.
  L.Step("symlink(created, dl2)", R(::symlink("created", L.C("dl2"))));
  L.Open("dl2", O_CREAT | O_EXCL | O_WRONLY, "O_CREAT|O_EXCL|O_WRONLY", EEXIST);
  int fd = L.Open("dl2", O_CREAT | O_WRONLY, "O_CREAT|O_WRONLY");
  L.Write(fd, "dl2", "via link");
  L.Close(fd, "dl2");
  L.Content("created", "via link");
  // A link to a directory, and a file opened through it.
  L.Step("mkdir(dir)", R(::mkdir(L.C("dir"), 0755)));
  L.MakeFile("dir/inner", "inner data");
  L.Step("symlink(dir, dirln)", R(::symlink("dir", L.C("dirln"))));
  L.Content("dirln/inner", "inner data");
  fd = L.Open("dirln/new", O_CREAT | O_WRONLY, "O_CREAT|O_WRONLY");
  L.Write(fd, "dirln/new", "made via dir link");
  L.Close(fd, "dirln/new");
  L.Content("dir/new", "made via dir link");
  L.PrintList("dirln");
  L.Stat("dirln");
  L.Lstat("dirln");
  L.Open("dirln", O_RDONLY | O_NOFOLLOW, "O_RDONLY|O_NOFOLLOW", ELOOP);
  // Linux checks O_DIRECTORY before O_NOFOLLOW's ELOOP.
  L.Open("dirln", O_RDONLY | O_DIRECTORY | O_NOFOLLOW,
         "O_RDONLY|O_DIRECTORY|O_NOFOLLOW", ENOTDIR);
  // A relative link pointing upwards, and a chain of links.
  L.Step("symlink(../target, dir/up)",
         R(::symlink("../target", L.C("dir/up"))));
  L.Content("dir/up", "target data");
  L.Step("symlink(ln, ln2)", R(::symlink("ln", L.C("ln2"))));
  L.Content("ln2", "target data");
  // A loop.
  L.Step("symlink(loop2, loop1)", R(::symlink("loop2", L.C("loop1"))));
  L.Step("symlink(loop1, loop2)", R(::symlink("loop1", L.C("loop2"))));
  L.Stat("loop1", ELOOP);
  L.Open("loop1", O_RDONLY, "O_RDONLY", ELOOP);
  // Unlink removes the link, not the target; rmdir of a link is ENOTDIR.
  L.Step("rmdir(dirln)", R(::rmdir(L.C("dirln"))), ENOTDIR);
  L.Step("unlink(ln)", R(::unlink(L.C("ln"))));
  L.Content("target", "target data");
  L.Stat("ln2", ENOENT);
  // A long target.
  const std::string long_target(200, 'q');
  L.Step("symlink(q*200, longln)",
         R(::symlink(long_target.c_str(), L.C("longln"))));
  L.Lstat("longln");
  // Renaming a link moves the link.
  L.Step("rename(dirln, dirln2)", R(::rename(L.C("dirln"), L.C("dirln2"))));
  L.Content("dirln2/inner", "inner data");
  L.PrintList("");
  return L.str();
}

// 9. mkdir and rmdir.
std::string MkdirRmdir(const std::string& root) {
  Log L(root);
  auto mkdir = [&](const std::string& rel, mode_t mode, int want) {
    L.Step("mkdir(" + rel + ", " + ModeStr(mode) + ")",
           R(::mkdir(L.C(rel), mode)), want);
  };
  auto rmdir = [&](const std::string& rel, int want) {
    L.Step("rmdir(" + rel + ")", R(::rmdir(L.C(rel))), want);
  };
  mkdir("d", 0755, kOk);
  L.Stat("d");
  mkdir("d", 0755, EEXIST);
  mkdir("d/e", 0750, kOk);
  L.Stat("d/e");
  mkdir("d/e/f", 0700, kOk);
  L.Stat("d/e/f");
  L.PrintList("d");
  rmdir("d", ENOTEMPTY);
  rmdir("d/e", ENOTEMPTY);
  L.MakeFile("file", "x");
  mkdir("file", 0755, EEXIST);
  rmdir("file", ENOTDIR);
  L.Step("unlink(d)", R(::unlink(L.C("d"))), EISDIR);
  mkdir("missing/x", 0755, ENOENT);
  mkdir("missing/x/y", 0755, ENOENT);
  mkdir("file/x", 0755, ENOTDIR);
  rmdir("missing", ENOENT);
  rmdir("d/.", EINVAL);
  rmdir("d/e/..", ENOTEMPTY);
  mkdir("d/", 0755, EEXIST);
  mkdir("g/", 0755, kOk);  // a trailing slash is fine for mkdir
  rmdir("g/", kOk);
  rmdir("d/e/f", kOk);
  rmdir("d/e/f", ENOENT);
  rmdir("d/e", kOk);
  L.PrintList("d");
  // A directory that only ever held a file.
  L.MakeFile("d/x", "x");
  rmdir("d", ENOTEMPTY);
  L.Step("unlink(d/x)", R(::unlink(L.C("d/x"))));
  rmdir("d", kOk);
  L.Stat("d", ENOENT);
  // Recreate after removal.
  mkdir("d", 0711, kOk);
  L.Stat("d");
  L.PrintList("");
  // A directory with many subdirectories.
  for (int i = 0; i < 20; ++i) {
    const std::string rel = Fmt("d/s%02d", i);
    if (::mkdir(L.C(rel), 0755) != 0) {
      L.Step("mkdir(" + rel + ")", Res{-1, errno});
    }
  }
  L.PrintList("d");
  rmdir("d", ENOTEMPTY);
  for (int i = 0; i < 20; ++i) {
    const std::string rel = Fmt("d/s%02d", i);
    if (::rmdir(L.C(rel)) != 0) L.Step("rmdir(" + rel + ")", Res{-1, errno});
  }
  rmdir("d", kOk);
  L.PrintList("");
  // Removed while open and made again under its name (ext4 gives the new
  // directory the removed one's inode number at once): a directory that
  // takes entries, not the removed one.
  mkdir("o", 0755, kOk);
  const int held = ::open(L.C("o"), O_RDONLY | O_DIRECTORY);
  L.Step("open(o, O_DIRECTORY)", R(held));
  rmdir("o", kOk);
  mkdir("o", 0711, kOk);
  mkdir("o/s", 0755, kOk);
  L.MakeFile("o/f", "x");
  L.PrintList("o");
  if (held >= 0) ::close(held);
  L.Step("unlink(o/f)", R(::unlink(L.C("o/f"))));
  rmdir("o/s", kOk);
  rmdir("o", kOk);
  return L.str();
}

// 10. chmod, chown and timestamps.
std::string ChmodChownTimes(const std::string& root) {
  Log L(root);
  auto times = [&](const std::string& rel, bool follow) {
    struct stat st {};
    const Res r = R(follow ? ::stat(L.C(rel), &st) : ::lstat(L.C(rel), &st));
    L.Step(std::string(follow ? "times(" : "ltimes(") + rel + ")", r, kOk,
           "atime=" + TimeStr(st.st_atim) + " mtime=" + TimeStr(st.st_mtim));
  };
  auto owner = [&](const std::string& rel, bool follow) {
    struct stat st {};
    const Res r = R(follow ? ::stat(L.C(rel), &st) : ::lstat(L.C(rel), &st));
    L.Step(std::string(follow ? "owner(" : "lowner(") + rel + ")", r, kOk,
           Fmt("uid=%u gid=%u mode=%s", static_cast<unsigned>(st.st_uid),
               static_cast<unsigned>(st.st_gid), ModeStr(st.st_mode).c_str()));
  };
  const bool root_user = ::geteuid() == 0;
  L.Line(std::string("running as root: ") + (root_user ? "yes" : "no"));
  L.MakeFile("f", "data");
  L.Step("chmod(f, 0600)", R(::chmod(L.C("f"), 0600)));
  L.Stat("f");
  L.Step("chmod(f, 04755)", R(::chmod(L.C("f"), 04755)));
  L.Stat("f");
  L.Step("chmod(f, 0)", R(::chmod(L.C("f"), 0)));
  L.Stat("f");
  L.Step("chmod(missing, 0644)", R(::chmod(L.C("missing"), 0644)), ENOENT);
  int fd = L.Open("f", O_RDONLY, "O_RDONLY", root_user ? kOk : EACCES);
  L.Step("fchmod(f, 04755)", R(::fchmod(fd, 04755)), root_user ? kOk : EBADF);
  L.Close(fd, "f");
  L.Stat("f");
  // chown clears set-user-ID on regular files.
  const int want_chown = root_user ? kOk : EPERM;
  L.Step("chown(f, 1234, 5678)", R(::chown(L.C("f"), 1234, 5678)), want_chown);
  owner("f", true);
  L.Step("chown(f, -1, -1)", R(::chown(L.C("f"), -1, -1)));
  owner("f", true);
  L.Step("chown(f, -1, 4321)", R(::chown(L.C("f"), -1, 4321)), want_chown);
  owner("f", true);
  // Directories keep their set-group-ID bit.
  L.Step("mkdir(d, 0755)", R(::mkdir(L.C("d"), 0755)));
  L.Step("chmod(d, 02775)", R(::chmod(L.C("d"), 02775)));
  L.Stat("d");
  L.Step("chown(d, 1234, 5678)", R(::chown(L.C("d"), 1234, 5678)), want_chown);
  owner("d", true);
  // lchown changes the link, not its target.
  L.MakeFile("t", "t");
  L.Step("symlink(t, ln)", R(::symlink("t", L.C("ln"))));
  L.Step("lchown(ln, 1111, 2222)", R(::lchown(L.C("ln"), 1111, 2222)),
         want_chown);
  owner("ln", false);
  owner("t", true);
  fd = L.Open("t", O_RDWR, "O_RDWR");
  L.Step("fchown(t, 3333, 4444)", R(::fchown(fd, 3333, 4444)), want_chown);
  L.Close(fd, "t");
  owner("t", true);
  // Explicit times.
  L.MakeFile("u", "times");
  struct timespec ts[2] = {{1000000000, 123456789}, {1234567890, 987654321}};
  L.Step("utimensat(u, 1000000000.123456789, 1234567890.987654321)",
         R(::utimensat(AT_FDCWD, L.C("u"), ts, 0)));
  times("u", true);
  ts[0] = {0, UTIME_OMIT};
  ts[1] = {1500000000, 0};
  L.Step("utimensat(u, UTIME_OMIT, 1500000000.0)",
         R(::utimensat(AT_FDCWD, L.C("u"), ts, 0)));
  times("u", true);
  ts[0] = {1600000000, 5};
  ts[1] = {0, UTIME_OMIT};
  L.Step("utimensat(u, 1600000000.000000005, UTIME_OMIT)",
         R(::utimensat(AT_FDCWD, L.C("u"), ts, 0)));
  times("u", true);
  fd = L.Open("u", O_RDWR, "O_RDWR");
  ts[0] = {2000000000, 1};
  ts[1] = {0, UTIME_OMIT};
  L.Step("futimens(u, 2000000000.000000001, UTIME_OMIT)",
         R(::futimens(fd, ts)));
  times("u", true);
  ts[0] = {0, UTIME_OMIT};
  ts[1] = {1700000000, 999999999};
  L.Step("futimens(u, UTIME_OMIT, 1700000000.999999999)",
         R(::futimens(fd, ts)));
  times("u", true);
  // A write moves mtime forward from a time in the past.
  L.Pwrite(fd, "u", "more", 5);
  struct stat st {};
  L.Fstat(fd, "u", &st);
  L.Expect("mtime after write > 1700000000", st.st_mtim.tv_sec > 1700000000);
  L.Close(fd, "u");
  // UTIME_NOW sets the current time (only compared, never printed).
  ts[0] = {0, UTIME_OMIT};
  ts[1] = {1, 0};
  ::utimensat(AT_FDCWD, L.C("u"), ts, 0);
  ts[1] = {0, UTIME_NOW};
  L.Step("utimensat(u, UTIME_OMIT, UTIME_NOW)",
         R(::utimensat(AT_FDCWD, L.C("u"), ts, 0)));
  ::stat(L.C("u"), &st);
  L.Expect("mtime now > 1700000000", st.st_mtim.tv_sec > 1700000000);
  // Times of a directory, and of a symlink itself.
  ts[0] = {1100000000, 0};
  ts[1] = {1200000000, 0};
  L.Step("utimensat(d, 1100000000, 1200000000)",
         R(::utimensat(AT_FDCWD, L.C("d"), ts, 0)));
  times("d", true);
  ts[0] = {1300000000, 0};
  ts[1] = {1400000000, 0};
  L.Step("utimensat(ln, AT_SYMLINK_NOFOLLOW)",
         R(::utimensat(AT_FDCWD, L.C("ln"), ts, AT_SYMLINK_NOFOLLOW)));
  times("ln", false);
  L.Step("utimensat(missing)", R(::utimensat(AT_FDCWD, L.C("missing"), ts, 0)),
         ENOENT);
  return L.str();
}

// 11. Extended attributes (user namespace).
std::string Xattrs(const std::string& root) {
  Log L(root);
  auto get = [&](const std::string& rel, const char* name, int want,
                 size_t size = 256) {
    std::string buf(size, '\0');
    const Res r =
        R(::getxattr(L.C(rel), name, size ? buf.data() : nullptr, size));
    std::string text = std::to_string(r.rc);
    if (size != 0 && r.rc >= 0) {
      buf.resize(r.rc);
      text += " " + Summary(buf);
    }
    L.Step(Fmt("getxattr(%s, %s, size=%zu)", rel.c_str(), name, size), r, want,
           text);
    return buf;
  };
  auto set = [&](const std::string& rel, const char* name,
                 const std::string& value, int flags, const char* flag_text,
                 int want) {
    L.Step(Fmt("setxattr(%s, %s, %zu bytes, %s)", rel.c_str(), name,
               value.size(), flag_text),
           R(::setxattr(L.C(rel), name, value.data(), value.size(), flags)),
           want);
  };
  auto list = [&](const std::string& rel) {
    const Res q = R(::listxattr(L.C(rel), nullptr, 0));
    std::string buf(q.rc > 0 ? q.rc : 0, '\0');
    const Res r = R(::listxattr(L.C(rel), buf.data(), buf.size()));
    std::vector<std::string> names;
    if (r.rc > 0) {
      buf.resize(r.rc);
      for (size_t p = 0; p < buf.size();) {
        const std::string n = buf.c_str() + p;
        p += n.size() + 1;
        // Other namespaces (security.*, system.*) depend on the system.
        if (n.rfind("user.", 0) == 0) names.push_back(n);
      }
    }
    std::sort(names.begin(), names.end());
    std::string text = JoinNames(names);
    if (q.rc >= 0 && r.rc >= 0 && q.rc != r.rc) {
      text += " UNEXPECTED(size query " + std::to_string(q.rc) +
              " != " + std::to_string(r.rc) + ")";
    }
    L.Step("listxattr(" + rel + ")", r, kOk, text);
  };
  L.MakeFile("x", "data");
  const Res first = R(::setxattr(L.C("x"), "user.a", "alpha", 5, 0));
  L.Step("setxattr(x, user.a, \"alpha\")", first, kAny);
  if (first.rc < 0 && (first.err == EOPNOTSUPP || first.err == ENOTSUP)) {
    // Both sides print the same when user xattrs are unsupported.
    L.Line("user xattrs unsupported");
    get("x", "user.a", kAny);
    list("x");
    L.Step("removexattr(x, user.a)", R(::removexattr(L.C("x"), "user.a")),
           kAny);
    L.Content("x", "data");
    return L.str();
  }
  const std::string alpha = get("x", "user.a", kOk);
  L.Expect("value is alpha", alpha == "alpha");
  get("x", "user.a", kOk, 0);     // size query
  get("x", "user.a", ERANGE, 2);  // buffer too small
  get("x", "user.missing", ENODATA);
  set("x", "user.b", "beta", 0, "0", kOk);
  set("x", "user.c", std::string("\0bin\xff\0", 6), 0, "0", kOk);
  const std::string bin = get("x", "user.c", kOk);
  L.Expect("binary value round-trips", bin == std::string("\0bin\xff\0", 6));
  set("x", "user.empty", "", 0, "0", kOk);
  get("x", "user.empty", kOk);
  list("x");
  set("x", "user.a", "again", XATTR_CREATE, "XATTR_CREATE", EEXIST);
  set("x", "user.zzz", "z", XATTR_REPLACE, "XATTR_REPLACE", ENODATA);
  set("x", "user.a", "replaced", XATTR_REPLACE, "XATTR_REPLACE", kOk);
  get("x", "user.a", kOk);
  set("x", "user.new", "n", XATTR_CREATE, "XATTR_CREATE", kOk);
  L.Step("removexattr(x, user.a)", R(::removexattr(L.C("x"), "user.a")));
  get("x", "user.a", ENODATA);
  L.Step("removexattr(x, user.a)", R(::removexattr(L.C("x"), "user.a")),
         ENODATA);
  list("x");
  // A large value.
  set("x", "user.big", Pattern(31, 0, 3000), 0, "0", kOk);
  const std::string big = get("x", "user.big", kOk, 4096);
  L.Expect("big value round-trips", big == Pattern(31, 0, 3000));
  // Through a descriptor.
  int fd = L.Open("x", O_RDONLY, "O_RDONLY");
  L.Step("fsetxattr(x, user.fd)",
         R(::fsetxattr(fd, "user.fd", "via fd", 6, 0)));
  char buf[64];
  const Res fr = R(::fgetxattr(fd, "user.fd", buf, sizeof(buf)));
  L.Step("fgetxattr(x, user.fd)", fr, kOk,
         "\"" + std::string(buf, fr.rc > 0 ? fr.rc : 0) + "\"");
  L.Step("fremovexattr(x, user.fd)", R(::fremovexattr(fd, "user.fd")));
  L.Close(fd, "x");
  // Xattrs survive a rename and are kept per inode (hard link shares them).
  L.Step("rename(x, y)", R(::rename(L.C("x"), L.C("y"))));
  list("y");
  L.Step("link(y, z)", R(::link(L.C("y"), L.C("z"))));
  get("z", "user.b", kOk);
  // A directory.
  L.Step("mkdir(d)", R(::mkdir(L.C("d"), 0755)));
  set("d", "user.dir", "dirval", 0, "0", kOk);
  get("d", "user.dir", kOk);
  list("d");
  // Missing file; user.* on a symlink itself is not permitted.
  get("missing", "user.a", ENOENT);
  L.Step("symlink(y, ln)", R(::symlink("y", L.C("ln"))));
  L.Step("lsetxattr(ln, user.l)",
         R(::lsetxattr(L.C("ln"), "user.l", "l", 1, 0)), EPERM);
  get("ln", "user.b", kOk);  // follows the link
  // Names: empty and unknown namespace.
  set("y", "", "v", 0, "0", kAny);
  set("y", "nonamespace", "v", 0, "0", EOPNOTSUPP);
  L.Content("y", "data");
  return L.str();
}

// 12. statfs and name limits.
std::string Statfs(const std::string& root) {
  Log L(root);
  auto show = [&](const std::string& desc, Res r, const struct statfs& s) {
    L.Step(desc, r, kOk,
           Fmt("namelen=%ld bsize>0=%s blocks>0=%s",
               static_cast<long>(s.f_namelen), s.f_bsize > 0 ? "yes" : "no",
               s.f_blocks > 0 ? "yes" : "no"));
  };
  struct statfs s {};
  show("statfs(.)", R(::statfs(L.C(""), &s)), s);
  L.MakeFile("f", "x");
  show("statfs(f)", R(::statfs(L.C("f"), &s)), s);
  const int fd = L.Open("f", O_RDONLY, "O_RDONLY");
  show("fstatfs(f)", R(::fstatfs(fd, &s)), s);
  L.Close(fd, "f");
  L.Step("statfs(missing)", R(::statfs(L.C("missing"), &s)), ENOENT);
  struct statvfs v {};
  const Res vr = R(::statvfs(L.C(""), &v));
  L.Step("statvfs(.)", vr, kOk,
         Fmt("namemax=%lu frsize>0=%s", static_cast<unsigned long>(v.f_namemax),
             v.f_frsize > 0 ? "yes" : "no"));
  L.AnyNum("pathconf(., _PC_NAME_MAX)", R(::pathconf(L.C(""), _PC_NAME_MAX)));
  // Names at and over the limit (255 on Linux file systems).
  const std::string n255(255, 'n');
  const std::string n256(256, 'n');
  const int nfd = L.Open(n255, O_CREAT | O_WRONLY, "O_CREAT|O_WRONLY");
  L.Close(nfd, "n*255");
  L.Open(n256, O_CREAT | O_WRONLY, "O_CREAT|O_WRONLY", ENAMETOOLONG);
  L.Stat(n256, ENAMETOOLONG);
  L.Step("mkdir(n*256)", R(::mkdir(L.C(n256), 0755)), ENAMETOOLONG);
  L.Step("unlink(n*255)", R(::unlink(L.C(n255))));
  return L.str();
}

// 13. readdir of a large directory, and readdir while deleting. 10000
// entries take about 80 FUSE readdir replies; under a sanitizer, where each
// create costs 5-10x, 2000 still take 16 (and 4 getdents buffers of the C
// library), which is what the scenario is about.
std::string ReaddirLarge(const std::string& root) {
  Log L(root);
  constexpr int kFiles = SizeFor(10000, 2000);
  auto name = [](int i) { return Fmt("f%05d", i); };
  L.Step("mkdir(big)", R(::mkdir(L.C("big"), 0755)));
  int create_errors = 0;
  for (int i = 0; i < kFiles; ++i) {
    const int fd = ::open(L.C("big/" + name(i)),
                          O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 || ::close(fd) != 0) {
      if (create_errors++ < 3) {
        L.Step("create(big/" + name(i) + ")", Res{-1, errno});
      }
    }
  }
  L.Line(Fmt("created=%d errors=%d", kFiles - create_errors, create_errors));
  auto index_of = [&](const std::string& n) {
    if (n.size() != 6 || n[0] != 'f') return -1;
    int v = 0;
    for (size_t i = 1; i < 6; ++i) {
      if (n[i] < '0' || n[i] > '9') return -1;
      v = v * 10 + (n[i] - '0');
    }
    return v < kFiles ? v : -1;
  };
  // A full pass.
  DIR* d = ::opendir(L.C("big"));
  L.Step("opendir(big)", RPtr(d, nullptr));
  if (d == nullptr) return L.str();
  std::vector<std::string> names;
  int dots = 0, dotdots = 0;
  Res r{0, 0};
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      if (errno != 0) r = Res{-1, errno};
      break;
    }
    const std::string n = e->d_name;
    if (n == ".") {
      ++dots;
    } else if (n == "..") {
      ++dotdots;
    } else {
      names.push_back(n);
    }
  }
  L.Step("readdir(big)", r, kOk,
         Fmt("entries=%zu dot=%d dotdot=%d", names.size(), dots, dotdots));
  std::sort(names.begin(), names.end());
  std::string joined;
  for (const std::string& n : names) joined += n + "\n";
  L.Line(Fmt("sorted names crc=0x%08x", Crc32(joined)));
  {
    std::vector<int> seen(kFiles, 0);
    int extra = 0;
    for (const std::string& n : names) {
      const int i = index_of(n);
      if (i < 0) {
        ++extra;
      } else {
        ++seen[i];
      }
    }
    int dups = 0, missing = 0;
    for (int c : seen) {
      if (c == 0) ++missing;
      if (c > 1) dups += c - 1;
    }
    const bool ok = dups == 0 && missing == 0 && extra == 0;
    L.Line(Fmt("dups=%d missing=%d extra=%d%s", dups, missing, extra,
               ok ? "" : " UNEXPECTED"));
  }
  // A second pass while deleting the odd-numbered half: on seeing f(2k) it
  // removes f(2k+1), on seeing f(2k+1) it removes that. Entries never removed
  // must each be returned exactly once (POSIX); the rest are unspecified.
  ::rewinddir(d);
  std::vector<int> seen(kFiles, 0);
  std::vector<bool> removed(kFiles, false);
  int unlink_errors = 0;
  auto remove = [&](int i) {
    if (removed[i]) return;
    removed[i] = true;
    if (::unlink(L.C("big/" + name(i))) != 0) {
      if (unlink_errors++ < 3) {
        L.Step("unlink(big/" + name(i) + ")", Res{-1, errno});
      }
    }
  };
  r = Res{0, 0};
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      if (errno != 0) r = Res{-1, errno};
      break;
    }
    const int i = index_of(e->d_name);
    if (i < 0) continue;
    ++seen[i];
    if (i % 2 == 0) {
      if (i + 1 < kFiles) remove(i + 1);
    } else {
      remove(i);
    }
  }
  L.Step("readdir-while-deleting(big)", r);
  {
    int kept_seen = 0, kept_dups = 0, kept_missing = 0, removed_count = 0;
    for (int i = 0; i < kFiles; ++i) {
      if (removed[i]) {
        ++removed_count;
        continue;
      }
      if (seen[i] >= 1) ++kept_seen;
      if (seen[i] == 0) ++kept_missing;
      if (seen[i] > 1) kept_dups += seen[i] - 1;
    }
    const bool ok = kept_dups == 0 && kept_missing == 0 &&
                    removed_count == kFiles / 2 && unlink_errors == 0;
    L.Line(
        Fmt("kept_seen=%d kept_dups=%d kept_missing=%d removed=%d "
            "unlink_errors=%d%s",
            kept_seen, kept_dups, kept_missing, removed_count, unlink_errors,
            ok ? "" : " UNEXPECTED"));
  }
  // After rewinddir exactly the even-numbered half remains.
  ::rewinddir(d);
  names.clear();
  r = Res{0, 0};
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      if (errno != 0) r = Res{-1, errno};
      break;
    }
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  bool exact = names.size() == kFiles / 2;
  for (size_t k = 0; exact && k < names.size(); ++k) {
    exact = names[k] == name(2 * k);
  }
  joined.clear();
  for (const std::string& n : names) joined += n + "\n";
  L.Step("readdir-after-rewinddir(big)", r, kOk,
         Fmt("entries=%zu crc=0x%08x%s", names.size(), Crc32(joined),
             exact ? "" : " UNEXPECTED(not exactly the even half)"));
  L.Step("closedir(big)", R(::closedir(d)));
  L.Step("rmdir(big)", R(::rmdir(L.C("big"))), ENOTEMPTY);
  int cleanup_errors = 0;
  for (const std::string& n : names) {
    if (::unlink(L.C("big/" + n)) != 0) ++cleanup_errors;
  }
  L.Line(Fmt("cleanup unlink errors=%d", cleanup_errors));
  L.Step("rmdir(big)", R(::rmdir(L.C("big"))));
  return L.str();
}

// 14. mmap reads and writes.
std::string Mmap(const std::string& root) {
  Log L(root);
  const size_t len = 3 * 4096 + 100;
  std::string model = Pattern(41, 0, len);
  L.MakeFile("m", model);
  int fd = L.Open("m", O_RDWR, "O_RDWR");
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (L.Step("mmap(m, MAP_SHARED, PROT_READ|PROT_WRITE)",
             RPtr(p, MAP_FAILED))) {
    char* m = static_cast<char*>(p);
    L.Expect("mapping shows file data", std::string(m, len) == model);
    const std::pair<size_t, const char*> edits[] = {
        {0, "head"}, {4094, "span"}, {8192, "third page"}, {len - 3, "end"}};
    for (const auto& [off, text] : edits) {
      std::memcpy(m + off, text, std::strlen(text));
      model.replace(off, std::strlen(text), text);
    }
    L.Step("msync(m, MS_SYNC)", R(::msync(p, len, MS_SYNC)));
    // A pwrite shows up in the shared mapping.
    L.Pwrite(fd, "m", "written by pwrite", 5000);
    model.replace(5000, 17, "written by pwrite");
    L.Expect("mapping shows pwrite",
             std::string(m + 5000, 17) == "written by pwrite");
    L.Step("munmap(m)", R(::munmap(p, len)));
  }
  L.Pread(fd, "m", len + 100, 0, model);
  L.Fstat(fd, "m");
  L.Close(fd, "m");
  L.Content("m", model);
  // A read-only shared mapping of a file written with pwrite.
  const std::string data = Pattern(42, 0, 70000);
  fd = L.Open("r", O_CREAT | O_RDWR, "O_CREAT|O_RDWR");
  L.Pwrite(fd, "r", data, 0);
  L.Close(fd, "r");
  fd = L.Open("r", O_RDONLY, "O_RDONLY");
  p = ::mmap(nullptr, data.size(), PROT_READ, MAP_SHARED, fd, 0);
  if (L.Step("mmap(r, MAP_SHARED, PROT_READ)", RPtr(p, MAP_FAILED))) {
    const std::string mapped(static_cast<char*>(p), data.size());
    L.Line("mapped r: " + Summary(mapped) +
           (mapped == data ? "" : " UNEXPECTED(want " + Summary(data) + ")"));
    L.Step("munmap(r)", R(::munmap(p, data.size())));
  }
  // Writable shared mapping of a read-only descriptor.
  p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p != MAP_FAILED) ::munmap(p, 4096);
  L.Step("mmap(r via O_RDONLY, MAP_SHARED, PROT_WRITE)", RPtr(p, MAP_FAILED),
         EACCES);
  // A private writable mapping never reaches the file.
  p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  if (L.Step("mmap(r, MAP_PRIVATE, PROT_READ|PROT_WRITE)",
             RPtr(p, MAP_FAILED))) {
    std::memcpy(p, "private", 7);
    L.Step("munmap(r)", R(::munmap(p, 4096)));
  }
  L.Pread(fd, "r", 4096, 0, data.substr(0, 4096));
  L.Close(fd, "r");
  fd = L.Open("r", O_WRONLY, "O_WRONLY");
  p = ::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
  if (p != MAP_FAILED) ::munmap(p, 4096);
  L.Step("mmap(r via O_WRONLY, MAP_SHARED, PROT_READ)", RPtr(p, MAP_FAILED),
         EACCES);
  L.Close(fd, "r");
  // A mapping that outlives its descriptor still writes back.
  fd = L.Open("r", O_RDWR, "O_RDWR");
  p = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const bool mapped =
      L.Step("mmap(r, MAP_SHARED, PROT_READ|PROT_WRITE)", RPtr(p, MAP_FAILED));
  L.Close(fd, "r");
  std::string expect = data;
  if (mapped) {
    std::memcpy(static_cast<char*>(p) + 100, "after close", 11);
    expect.replace(100, 11, "after close");
    L.Step("msync(r, MS_SYNC)", R(::msync(p, 4096, MS_SYNC)));
    L.Step("munmap(r)", R(::munmap(p, 4096)));
  }
  L.Content("r", expect);
  return L.str();
}

// 15. Concurrent writers to one file.
std::string ConcurrentWriters(const std::string& root) {
  Log L(root);
  constexpr int kThreads = 4;
  constexpr int64_t kRegion = 256 * kKiB;
  constexpr int64_t kBlock = 4 * kKiB;
  constexpr int kBlocksPerThread = kRegion / kBlock;
  int fd = L.Open("c", O_CREAT | O_RDWR, "O_CREAT|O_RDWR");
  {
    std::vector<int> errors(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        // Interleave the threads' blocks in time: odd blocks first.
        for (int pass = 0; pass < 2; ++pass) {
          for (int b = pass; b < kBlocksPerThread; b += 2) {
            const int64_t off = t * kRegion + b * kBlock;
            const std::string data = Pattern(100 + t, off, kBlock);
            if (::pwrite(fd, data.data(), data.size(), off) != kBlock) {
              ++errors[t];
            }
          }
        }
      });
    }
    for (std::thread& th : threads) th.join();
    L.Line(Fmt("pwrite errors=%d,%d,%d,%d", errors[0], errors[1], errors[2],
               errors[3]));
  }
  L.Fstat(fd, "c");
  {
    int ok = 0, bad = 0;
    std::string buf(kBlock, '\0');
    for (int t = 0; t < kThreads; ++t) {
      for (int b = 0; b < kBlocksPerThread; ++b) {
        const int64_t off = t * kRegion + b * kBlock;
        const bool good = ::pread(fd, buf.data(), kBlock, off) == kBlock &&
                          buf == Pattern(100 + t, off, kBlock);
        ++(good ? ok : bad);
      }
    }
    L.Line(Fmt("blocks_ok=%d bad=%d%s", ok, bad, bad ? " UNEXPECTED" : ""));
  }
  L.Close(fd, "c");
  // O_APPEND from four descriptors at once: records never interleave.
  constexpr int kRecords = 1000;
  constexpr size_t kRecordLen = 64;
  auto record = [](int t, int i) {
    std::string r = Fmt("thread=%d record=%06d ", t, i);
    while (r.size() < kRecordLen - 1)
      r += static_cast<char>('a' + (i + t) % 26);
    r += '\n';
    return r;
  };
  {
    std::vector<int> fds(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      fds[t] = L.Open("log", O_CREAT | O_WRONLY | O_APPEND,
                      Fmt("O_CREAT|O_WRONLY|O_APPEND #%d", t));
    }
    std::vector<int> errors(kThreads, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kRecords; ++i) {
          const std::string r = record(t, i);
          if (::write(fds[t], r.data(), r.size()) !=
              static_cast<ssize_t>(r.size())) {
            ++errors[t];
          }
        }
      });
    }
    for (std::thread& th : threads) th.join();
    L.Line(Fmt("append errors=%d,%d,%d,%d", errors[0], errors[1], errors[2],
               errors[3]));
    for (int t = 0; t < kThreads; ++t) L.Close(fds[t], Fmt("log #%d", t));
  }
  struct stat st {};
  L.Stat("log", kOk, &st);
  L.Expect("size == 4*1000*64",
           st.st_size == static_cast<off_t>(kThreads * kRecords * kRecordLen));
  const std::string log = L.Slurp("log");
  std::vector<int> next(kThreads, 0);
  int intact = 0, broken = 0, out_of_order = 0;
  for (size_t p = 0; p + kRecordLen <= log.size(); p += kRecordLen) {
    const std::string r = log.substr(p, kRecordLen);
    int t = -1, i = -1;
    if (std::sscanf(r.c_str(), "thread=%d record=%d ", &t, &i) != 2 || t < 0 ||
        t >= kThreads || i < 0 || i >= kRecords || r != record(t, i)) {
      ++broken;
      continue;
    }
    ++intact;
    if (i != next[t]) ++out_of_order;
    next[t] = i + 1;
  }
  const bool ok = broken == 0 && out_of_order == 0 &&
                  intact == kThreads * kRecords && log.size() % kRecordLen == 0;
  L.Line(Fmt("records=%d intact=%d broken=%d out_of_order=%d%s",
             static_cast<int>(log.size() / kRecordLen), intact, broken,
             out_of_order, ok ? "" : " UNEXPECTED"));
  L.Line(Fmt("per_thread=%d,%d,%d,%d", next[0], next[1], next[2], next[3]));
  return L.str();
}

// 16. fsync, fdatasync and fallocate.
std::string SyncFallocate(const std::string& root) {
  Log L(root);
  int fd = L.Open("a", O_CREAT | O_RDWR, "O_CREAT|O_RDWR");
  L.Step("fallocate(a, 0, 0, 1MiB)", R(::fallocate(fd, 0, 0, kMiB)));
  L.Fstat(fd, "a");
  L.Pread(fd, "a", kMiB, 0, std::string(kMiB, '\0'));
  L.Step("fallocate(a, KEEP_SIZE, 1MiB, 1MiB)",
         R(::fallocate(fd, FALLOC_FL_KEEP_SIZE, kMiB, kMiB)));
  L.Fstat(fd, "a");
  L.Num("lseek(a, 0, SEEK_END)", R(::lseek(fd, 0, SEEK_END)), kMiB);
  // Allocating inside the file changes nothing visible.
  const std::string data = Pattern(51, 0, 10000);
  L.Pwrite(fd, "a", data, 0);
  L.Step("fallocate(a, 0, 0, 4096)", R(::fallocate(fd, 0, 0, 4096)));
  L.Pread(fd, "a", 10000, 0, data);
  // Allocating past the end extends it with zeros.
  L.Step("fallocate(a, 0, 1MiB, 8192)", R(::fallocate(fd, 0, kMiB, 8192)));
  L.Fstat(fd, "a");
  L.Pread(fd, "a", 8192, kMiB, std::string(8192, '\0'));
  // Punching a hole zeroes the range and keeps the size.
  L.Step("fallocate(a, PUNCH_HOLE|KEEP_SIZE, 4096, 4096)",
         R(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 4096,
                       4096)));
  L.Fstat(fd, "a");
  L.Pread(fd, "a", 10000, 0,
          data.substr(0, 4096) + std::string(4096, '\0') + data.substr(8192));
  // Invalid requests are rejected by the VFS whatever the file system.
  L.Step("fallocate(a, PUNCH_HOLE, 0, 4096)",
         R(::fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, 4096)), EOPNOTSUPP);
  L.Step("fallocate(a, 0, 0, 0)", R(::fallocate(fd, 0, 0, 0)), EINVAL);
  L.Step("fallocate(a, 0, -1, 10)", R(::fallocate(fd, 0, -1, 10)), EINVAL);
  L.Step("fsync(a)", R(::fsync(fd)));
  L.Step("fdatasync(a)", R(::fdatasync(fd)));
  L.Close(fd, "a");
  fd = L.Open("a", O_RDONLY, "O_RDONLY");
  L.Step("fallocate(a via O_RDONLY)", R(::fallocate(fd, 0, 0, 4096)), EBADF);
  L.Step("fsync(a via O_RDONLY)", R(::fsync(fd)));
  L.Close(fd, "a");
  // O_SYNC and O_DSYNC writes.
  fd = L.Open("b", O_CREAT | O_WRONLY | O_SYNC, "O_CREAT|O_WRONLY|O_SYNC");
  L.Write(fd, "b", "synced ");
  L.Close(fd, "b");
  fd = L.Open("b", O_WRONLY | O_APPEND | O_DSYNC, "O_WRONLY|O_APPEND|O_DSYNC");
  L.Write(fd, "b", "dsynced");
  L.Step("fsync(b)", R(::fsync(fd)));
  L.Close(fd, "b");
  L.Content("b", "synced dsynced");
  // fsync of a directory.
  fd = L.Open("", O_RDONLY | O_DIRECTORY, "O_RDONLY|O_DIRECTORY");
  L.Step("fsync(.)", R(::fsync(fd)));
  L.Close(fd, ".");
  L.Step("fsync(-1)", R(::fsync(-1)), EBADF);
  return L.str();
}

// 17. Size after writes at various offsets, by descriptor and by path.
std::string WriteThenStat(const std::string& root) {
  Log L(root);
  const int fd = L.Open("w", O_CREAT | O_RDWR, "O_CREAT|O_RDWR");
  const int reader = L.Open("w", O_RDONLY, "O_RDONLY");
  int64_t size = 0;
  auto check = [&](int64_t want) {
    struct stat a {
    }, b{}, c{};
    ::fstat(fd, &a);
    ::stat(L.C("w"), &b);
    ::fstat(reader, &c);
    const bool ok = a.st_size == want && b.st_size == want && c.st_size == want;
    L.Line(Fmt("size: fstat=%lld stat=%lld other_fd=%lld%s",
               static_cast<long long>(a.st_size),
               static_cast<long long>(b.st_size),
               static_cast<long long>(c.st_size), ok ? "" : " UNEXPECTED"));
  };
  const std::pair<int64_t, size_t> writes[] = {
      {0, 1},         {10, 5},    {4096, 1},         {3, 2},     {kMiB, 0},
      {100000, 4096}, {65535, 2}, {2 * kMiB - 1, 1}, {1000, 100}};
  for (const auto& [off, len] : writes) {
    L.Pwrite(fd, "w", Pattern(61, off, len), off);
    if (len > 0) size = std::max<int64_t>(size, off + len);
    check(size);
  }
  // write() after seeking past the end.
  L.Num("lseek(w, 10, SEEK_END)", R(::lseek(fd, 10, SEEK_END)), size + 10);
  L.Write(fd, "w", "x");
  size += 11;
  check(size);
  // Seeking past the end alone changes nothing.
  L.Num("lseek(w, 1MiB, SEEK_END)", R(::lseek(fd, kMiB, SEEK_END)),
        size + kMiB);
  check(size);
  // A write through a second descriptor.
  const int other = L.Open("w", O_WRONLY, "O_WRONLY");
  L.Pwrite(other, "w (other fd)", "yy", size + 5);
  size += 7;
  check(size);
  L.Close(other, "w");
  L.Step("ftruncate(w, 12345)", R(::ftruncate(fd, 12345)));
  check(12345);
  L.Close(reader, "w");
  L.Close(fd, "w");
  L.Stat("w");
  return L.str();
}

// 18. A directory tree 20 levels deep: create, list, move, remove.
std::string DeepTree(const std::string& root) {
  Log L(root);
  constexpr int kDepth = 20;
  std::vector<std::string> dirs;  // dirs[i] is the path of level i
  std::string path;
  for (int i = 0; i < kDepth; ++i) {
    path += (i ? "/" : "") + Fmt("lvl%02d", i);
    dirs.push_back(path);
    L.Step("mkdir(" + path + ")", R(::mkdir(L.C(path), 0755)));
    L.MakeFile(path + "/file", Fmt("level %d", i));
  }
  L.Stat(dirs.back());
  for (int i = 0; i < kDepth; ++i) L.PrintList(dirs[i]);
  for (int i = 0; i < kDepth; ++i) {
    L.Content(dirs[i] + "/file", Fmt("level %d", i));
  }
  // Walk down with openat.
  int fd = ::open(L.C(""), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int reached = 0;
  for (int i = 0; i < kDepth && fd >= 0; ++i) {
    const int next = ::openat(fd, Fmt("lvl%02d", i).c_str(),
                              O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ::close(fd);
    fd = next;
    if (fd >= 0) ++reached;
  }
  char buf[64] = {};
  const int ffd = fd >= 0 ? ::openat(fd, "file", O_RDONLY | O_CLOEXEC) : -1;
  const ssize_t n = ffd >= 0 ? ::read(ffd, buf, sizeof(buf) - 1) : -1;
  if (ffd >= 0) ::close(ffd);
  if (fd >= 0) ::close(fd);
  L.Line(Fmt("openat walk: reached=%d deepest file=\"%s\"%s", reached,
             n > 0 ? std::string(buf, n).c_str() : "",
             reached == kDepth && n > 0 ? "" : " UNEXPECTED"));
  // Move the whole tree; everything follows.
  L.Step("rename(lvl00, moved)", R(::rename(L.C("lvl00"), L.C("moved"))));
  std::string moved_deepest = "moved" + dirs.back().substr(5) + "/file";
  L.Content(moved_deepest, Fmt("level %d", kDepth - 1));
  L.Stat(dirs.back() + "/file", ENOENT);
  L.Step("rename(moved, lvl00)", R(::rename(L.C("moved"), L.C("lvl00"))));
  // Remove: top first fails, then bottom-up.
  L.Step("rmdir(lvl00)", R(::rmdir(L.C("lvl00"))), ENOTEMPTY);
  for (int i = kDepth - 1; i >= 0; --i) {
    L.Step("unlink(" + dirs[i] + "/file)", R(::unlink(L.C(dirs[i] + "/file"))));
    L.Step("rmdir(" + dirs[i] + ")", R(::rmdir(L.C(dirs[i]))));
  }
  L.PrintList("");
  return L.str();
}

// A tree deeper than PATH_MAX beneath the root, reached with *at() calls
// from a directory fd (an absolute path that long fails in the kernel
// before any file system sees it): make it, then create, stat, chmod,
// truncate, rename, link and unlink at the bottom, and remove it all.
std::string DeeperThanPathMax(const std::string& root) {
  Log L(root);
  constexpr int kDepth = 24;  // 24 names of 200 bytes: over 4800 bytes
  const std::string name(200, 'd');
  int fd = ::open(L.C(""), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  std::vector<int> fds;
  int made = 0;
  for (int i = 0; i < kDepth && fd >= 0; ++i) {
    if (::mkdirat(fd, name.c_str(), 0755) != 0) break;
    const int next =
        ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    fds.push_back(fd);
    fd = next;
    if (fd >= 0) ++made;
  }
  L.Line(Fmt("levels made: %d%s", made, made == kDepth ? "" : " UNEXPECTED"));
  if (fd < 0) {
    for (int f : fds) ::close(f);
    return L.str();
  }
  auto step = [&](const std::string& desc, Res r, int want = kOk) {
    L.Step("bottom: " + desc, r, want);
  };
  int f = ::openat(fd, "file", O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0644);
  step("openat(file, O_CREAT|O_EXCL)", R(f));
  step("pwrite(file, 5)", R(f >= 0 ? ::pwrite(f, "hello", 5, 0) : -1));
  struct stat st {};
  step("fstatat(file)", R(::fstatat(fd, "file", &st, AT_SYMLINK_NOFOLLOW)));
  L.Line("bottom: file " + StatStr(st));
  step("fchmodat(file, 0600)", R(::fchmodat(fd, "file", 0600, 0)));
  step("ftruncate(file, 3)", R(f >= 0 ? ::ftruncate(f, 3) : -1));
  if (f >= 0) ::close(f);
  step("fstatat(file)", R(::fstatat(fd, "file", &st, AT_SYMLINK_NOFOLLOW)));
  L.Line("bottom: file " + StatStr(st));
  step("renameat(file, moved)", R(::renameat(fd, "file", fd, "moved")));
  step("linkat(moved, link)", R(::linkat(fd, "moved", fd, "link", 0)));
  step("fstatat(link)", R(::fstatat(fd, "link", &st, AT_SYMLINK_NOFOLLOW)));
  L.Line("bottom: link " + StatStr(st));
  step("symlinkat(moved, sym)", R(::symlinkat("moved", fd, "sym")));
  char buf[16] = {};
  const int rf = ::openat(fd, "sym", O_RDONLY | O_CLOEXEC);
  const ssize_t n = rf >= 0 ? ::read(rf, buf, sizeof(buf)) : -1;
  if (rf >= 0) ::close(rf);
  L.Line(Fmt("bottom: read through sym: \"%s\"%s",
             n > 0 ? std::string(buf, n).c_str() : "",
             n == 3 && std::string(buf, 3) == "hel" ? "" : " UNEXPECTED"));
  step("mkdirat(sub)", R(::mkdirat(fd, "sub", 0700)));
  step("renameat(sub, sub2)", R(::renameat(fd, "sub", fd, "sub2")));
  step("unlinkat(sub2, AT_REMOVEDIR)", R(::unlinkat(fd, "sub2", AT_REMOVEDIR)));
  for (const char* leaf : {"moved", "link", "sym"}) {
    step(std::string("unlinkat(") + leaf + ")", R(::unlinkat(fd, leaf, 0)));
  }
  step("fstatat(moved)", R(::fstatat(fd, "moved", &st, 0)), ENOENT);
  ::close(fd);
  int removed = 0;
  for (int i = static_cast<int>(fds.size()) - 1; i >= 0; --i) {
    if (::unlinkat(fds[i], name.c_str(), AT_REMOVEDIR) == 0) ++removed;
    ::close(fds[i]);
  }
  L.Line(Fmt("levels removed: %d%s", removed,
             removed == made ? "" : " UNEXPECTED"));
  return L.str();
}

// --- Identity: several users on one tree (scenarios run as root) -------

// Runs `call` as `u` in a child process and returns its result.
Res AsUser(const User& u, const std::function<Res()>& call) {
  const std::string out = RunAs(u, [&] {
    const Res r = call();
    return Fmt("%lld %d", static_cast<long long>(r.rc), r.err);
  });
  long long rc = -1;
  int err = EIO;
  if (std::sscanf(out.c_str(), "%lld %d", &rc, &err) != 2) return Res{-1, EIO};
  return Res{rc, err};
}

class Users {
 public:
  explicit Users(Log& L) : L_(L) {}
  // "as UID: desc: ok|ENAME".
  bool Do(const User& u, const std::string& desc,
          const std::function<Res()>& call, int want = kOk) {
    return L_.Step(Fmt("as %u: ", static_cast<unsigned>(u.uid)) + desc,
                   AsUser(u, call), want);
  }
  bool Creat(const User& u, const std::string& rel, mode_t mode,
             int want = kOk) {
    const std::string path = L_.P(rel);
    return Do(
        u, "creat(" + rel + ", " + ModeStr(mode) + ")",
        [path, mode] {
          const int fd =
              ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, mode);
          const Res r = R(fd);
          if (fd >= 0) ::close(fd);
          return r;
        },
        want);
  }
  bool Mkdir(const User& u, const std::string& rel, mode_t mode,
             int want = kOk) {
    const std::string path = L_.P(rel);
    return Do(
        u, "mkdir(" + rel + ", " + ModeStr(mode) + ")",
        [path, mode] { return R(::mkdir(path.c_str(), mode)); }, want);
  }
  // Owner and mode of `rel` (lstat, as root).
  void Owner(const std::string& rel) {
    struct stat st {};
    const Res r = R(::lstat(L_.C(rel), &st));
    L_.Step("owner(" + rel + ")", r, kOk,
            Fmt("uid=%u gid=%u mode=%s", static_cast<unsigned>(st.st_uid),
                static_cast<unsigned>(st.st_gid), ModeStr(st.st_mode).c_str()));
  }

 private:
  Log& L_;
};

std::string IdentityOwners(const std::string& root) {
  Log L(root);
  Users U(L);
  const User a = Nobody(), b = Grouped();
  L.Step("chmod(., 01777)", R(::chmod(L.C(""), 01777)));
  const std::string P = root;
  U.Creat(a, "fa", 0666);
  U.Owner("fa");
  U.Mkdir(a, "da", 0777);
  U.Owner("da");
  U.Do(a, "mkfifo(pa)", [P] { return R(::mkfifo((P + "/pa").c_str(), 0666)); });
  U.Owner("pa");
  U.Do(
      a, "mknod(ca, char 1:3)",
      [P] {
        return R(::mknod((P + "/ca").c_str(), S_IFCHR | 0666, makedev(1, 3)));
      },
      EPERM);
  U.Do(a, "symlink(fa, la)",
       [P] { return R(::symlink("fa", (P + "/la").c_str())); });
  U.Owner("la");
  U.Do(a, "link(fa, fa2)",
       [P] { return R(::link((P + "/fa").c_str(), (P + "/fa2").c_str())); });
  L.Stat("fa");
  U.Creat(b, "fb", 0640);
  U.Owner("fb");
  U.Do(a, "chmod(fa, 0600)",
       [P] { return R(::chmod((P + "/fa").c_str(), 0600)); });
  U.Do(
      a, "chmod(fb, 0600)",
      [P] { return R(::chmod((P + "/fb").c_str(), 0600)); }, EPERM);
  U.Do(
      a, "chown(fa, 60000, -1)",
      [P] { return R(::chown((P + "/fa").c_str(), 60000, -1)); }, EPERM);
  U.Do(
      a, "chown(fa, -1, 60001)",
      [P] { return R(::chown((P + "/fa").c_str(), -1, 60001)); }, EPERM);
  U.Do(b, "chown(fb, -1, 60001)",
       [P] { return R(::chown((P + "/fb").c_str(), -1, 60001)); });
  U.Owner("fb");
  U.Do(
      b, "chown(fb, -1, 65534)",
      [P] { return R(::chown((P + "/fb").c_str(), -1, 65534)); }, EPERM);
  U.Do(
      a, "truncate(fb, 0)",
      [P] { return R(::truncate((P + "/fb").c_str(), 0)); }, EACCES);
  U.Do(
      a, "open(fb, O_RDONLY)",
      [P] {
        const int fd = ::open((P + "/fb").c_str(), O_RDONLY);
        const Res r = R(fd);
        if (fd >= 0) ::close(fd);
        return r;
      },
      EACCES);
  U.Do(b, "truncate(fb, 3)",
       [P] { return R(::truncate((P + "/fb").c_str(), 3)); });
  L.Stat("fb");
  U.Do(
      a, "utimensat(fb, now)",
      [P] { return R(::utimensat(AT_FDCWD, (P + "/fb").c_str(), nullptr, 0)); },
      EACCES);
  U.Do(b, "utimensat(fb, now)", [P] {
    return R(::utimensat(AT_FDCWD, (P + "/fb").c_str(), nullptr, 0));
  });
  // protected_hardlinks (a sysctl) decides; the same either way.
  U.Do(
      a, "link(fb, lb)",
      [P] { return R(::link((P + "/fb").c_str(), (P + "/lb").c_str())); },
      kAny);
  U.Do(a, "chmod(fa, 04755)",
       [P] { return R(::chmod((P + "/fa").c_str(), 04755)); });
  U.Owner("fa");
  U.Do(b, "chmod(fb, 02640)",
       [P] { return R(::chmod((P + "/fb").c_str(), 02640)); });
  U.Owner("fb");
  U.Do(b, "chown(fb, -1, 60002)",
       [P] { return R(::chown((P + "/fb").c_str(), -1, 60002)); });
  U.Owner("fb");
  // An open file keeps working after its mode changes.
  U.Do(a, "open(fa, O_RDWR); chmod(fa, 0); pwrite; pread", [P] {
    const std::string f = P + "/fa";
    const int fd = ::open(f.c_str(), O_RDWR);
    if (fd < 0) return R(fd);
    Res r = R(::chmod(f.c_str(), 0));
    if (r.rc >= 0) r = R(::pwrite(fd, "abc", 3, 0));
    char buf[3];
    if (r.rc >= 0) r = R(::pread(fd, buf, 3, 0));
    if (r.rc >= 0 && std::string(buf, 3) != "abc") r = Res{-1, EIO};
    ::close(fd);
    return r;
  });
  U.Owner("fa");
  L.Stat("fa");
  U.Do(
      a, "open(fa, O_RDONLY)",
      [P] {
        const int fd = ::open((P + "/fa").c_str(), O_RDONLY);
        const Res r = R(fd);
        if (fd >= 0) ::close(fd);
        return r;
      },
      EACCES);
  return L.str();
}

std::string IdentitySetgidDirs(const std::string& root) {
  Log L(root);
  Users U(L);
  const User a = Nobody(), b = Grouped();
  L.Step("mkdir(g, 0775)", R(::mkdir(L.C("g"), 0775)));
  L.Step("chown(g, 0, 60001)", R(::chown(L.C("g"), 0, 60001)));
  L.Step("chmod(g, 02775)", R(::chmod(L.C("g"), 02775)));
  U.Owner("g");
  U.Creat(b, "g/fb", 0644);
  U.Owner("g/fb");
  U.Mkdir(b, "g/sub", 0755);
  U.Owner("g/sub");
  U.Creat(b, "g/sub/deeper", 0600);
  U.Owner("g/sub/deeper");
  U.Creat(a, "g/fa", 0644, EACCES);  // not in the group
  L.Step("chmod(g, 02777)", R(::chmod(L.C("g"), 02777)));
  // The set-group-ID bit of a new file is dropped for a creator outside
  // the group, kept for a member.
  U.Creat(a, "g/fa", 02755);
  U.Owner("g/fa");
  U.Creat(b, "g/fb2", 02755);
  U.Owner("g/fb2");
  U.Mkdir(a, "g/da", 0777);
  U.Owner("g/da");
  const std::string P = root;
  U.Do(a, "mkfifo(g/pa)",
       [P] { return R(::mkfifo((P + "/g/pa").c_str(), 0666)); });
  U.Owner("g/pa");
  U.Do(a, "symlink(fa, g/la)",
       [P] { return R(::symlink("fa", (P + "/g/la").c_str())); });
  U.Owner("g/la");
  return L.str();
}

std::string IdentitySticky(const std::string& root) {
  Log L(root);
  Users U(L);
  const User a = Nobody(), b = Grouped();
  const std::string P = root;
  L.Step("mkdir(s, 01777)", R(::mkdir(L.C("s"), 0777)));
  L.Step("chmod(s, 01777)", R(::chmod(L.C("s"), 01777)));
  U.Creat(a, "s/a", 0666);
  U.Creat(b, "s/b", 0666);
  auto unlink = [P](const std::string& rel) {
    return [P, rel] { return R(::unlink((P + "/" + rel).c_str())); };
  };
  auto rename = [P](const std::string& from, const std::string& to) {
    return [P, from, to] {
      return R(::rename((P + "/" + from).c_str(), (P + "/" + to).c_str()));
    };
  };
  U.Do(b, "unlink(s/a)", unlink("s/a"), EPERM);
  U.Do(b, "rename(s/a, s/c)", rename("s/a", "s/c"), EPERM);
  U.Do(b, "rename(s/b, s/a)", rename("s/b", "s/a"), EPERM);
  U.Do(a, "unlink(s/b)", unlink("s/b"), EPERM);
  U.Do(a, "rename(s/a, s/a2)", rename("s/a", "s/a2"));
  U.Owner("s/a2");
  U.Do(a, "unlink(s/a2)", unlink("s/a2"));
  U.Mkdir(b, "s/db", 0777);
  U.Do(
      a, "rmdir(s/db)", [P] { return R(::rmdir((P + "/s/db").c_str())); },
      EPERM);
  U.Do(b, "rmdir(s/db)", [P] { return R(::rmdir((P + "/s/db").c_str())); });
  L.Step("unlink(s/b) as root", R(::unlink(L.C("s/b"))));
  L.PrintList("s");
  return L.str();
}

std::string IdentitySearch(const std::string& root) {
  Log L(root);
  Users U(L);
  const User a = Nobody();
  const std::string P = root;
  L.Step("mkdir(p, 0700)", R(::mkdir(L.C("p"), 0700)));
  L.MakeFile("p/x", "x");
  auto stat = [P](const std::string& rel) {
    return [P, rel] {
      struct stat st;
      return R(::stat((P + "/" + rel).c_str(), &st));
    };
  };
  auto open_ro = [P](const std::string& rel) {
    return [P, rel] {
      const int fd = ::open((P + "/" + rel).c_str(), O_RDONLY);
      const Res r = R(fd);
      if (fd >= 0) ::close(fd);
      return r;
    };
  };
  U.Do(a, "stat(p/x)", stat("p/x"), EACCES);
  U.Do(a, "open(p/x)", open_ro("p/x"), EACCES);
  U.Creat(a, "p/y", 0644, EACCES);
  L.Step("chmod(p, 0711)", R(::chmod(L.C("p"), 0711)));
  U.Do(a, "stat(p/x)", stat("p/x"));
  U.Do(a, "open(p/x)", open_ro("p/x"));
  U.Do(
      a, "opendir(p)",
      [P] {
        DIR* d = ::opendir((P + "/p").c_str());
        const Res r = RPtr(d, nullptr);
        if (d != nullptr) ::closedir(d);
        return r;
      },
      EACCES);
  U.Creat(a, "p/y", 0644, EACCES);
  L.Step("chmod(p, 0733)", R(::chmod(L.C("p"), 0733)));
  U.Creat(a, "p/y", 0644);
  U.Owner("p/y");
  L.Step("chmod(p/x, 0600)", R(::chmod(L.C("p/x"), 0600)));
  U.Do(a, "open(p/x)", open_ro("p/x"), EACCES);
  return L.str();
}

std::string IdentityUmask(const std::string& root) {
  Log L(root);
  Users U(L);
  User a = Nobody();
  a.umask = 027;
  L.Step("chmod(., 0777)", R(::chmod(L.C(""), 0777)));
  U.Creat(a, "f", 0666);
  U.Owner("f");
  U.Mkdir(a, "d", 0777);
  U.Owner("d");
  a.umask = 0;
  U.Creat(a, "g", 0666);
  U.Owner("g");
  return L.str();
}

}  // namespace

void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

std::vector<Scenario> PosixScenarios() {
  return {
      {"open_flags", OpenFlags},
      {"pread_pwrite_offsets", PreadPwrite},
      {"sparse_past_4gib", SparseFile},
      {"truncate", Truncate},
      {"rename", Rename},
      {"unlink_open_file", UnlinkOpen},
      {"hard_links", HardLinks},
      {"symlinks", Symlinks},
      {"mkdir_rmdir", MkdirRmdir},
      {"chmod_chown_utimens", ChmodChownTimes},
      {"xattrs", Xattrs},
      {"statfs", Statfs},
      {"readdir_large", ReaddirLarge},
      {"mmap", Mmap},
      {"concurrent_writers", ConcurrentWriters},
      {"fsync_fallocate", SyncFallocate},
      {"write_then_stat_size", WriteThenStat},
      {"deep_tree", DeepTree},
      {"deeper_than_path_max", DeeperThanPathMax},
  };
}

// What a write, truncate, fallocate, O_TRUNC open or chown by a caller
// without CAP_FSETID clears: the set-user-ID bit, the set-group-ID bit of
// a group-executable file (not of one without group execute: that marks
// mandatory locking) and the file capabilities; what root's own write
// keeps. The writer may write but does not own the file (the kernel's own
// clearing would be a chmod it may not make), or owns it.
std::string IdentitySetidClearing(const std::string& root) {
  Log L(root);
  Users U(L);
  const User a = Nobody(), b = Grouped();
  const std::string P = root;
  auto make = [&](const std::string& rel, mode_t mode) {
    L.MakeFile(rel, "data");
    L.Step("chmod(" + rel + ", " + ModeStr(mode) + ")",
           R(::chmod(L.C(rel), mode)));
  };
  auto append = [P](const std::string& rel) {
    return [P, rel] {
      const int fd = ::open((P + "/" + rel).c_str(), O_WRONLY | O_APPEND);
      if (fd < 0) return R(fd);
      Res r = R(::write(fd, "x", 1));
      ::close(fd);
      return r;
    };
  };
  make("su", 04777);
  U.Do(a, "append(su)", append("su"));
  L.Stat("su");
  make("sg", 02777);
  U.Do(a, "append(sg)", append("sg"));
  L.Stat("sg");
  make("sugx", 06777);
  U.Do(a, "append(sugx)", append("sugx"));
  L.Stat("sugx");
  // Without group execute, the set-group-ID bit stays for a writer in the
  // file's group and goes for one outside it.
  make("sgnx", 02767);
  U.Do(a, "append(sgnx)", append("sgnx"));
  L.Stat("sgnx");
  make("sgnxg", 02767);
  L.Step("chown(sgnxg, 0, 60001)", R(::chown(L.C("sgnxg"), 0, 60001)));
  L.Step("chmod(sgnxg, 02767)", R(::chmod(L.C("sgnxg"), 02767)));
  U.Do(b, "append(sgnxg)", append("sgnxg"));
  L.Stat("sgnxg");
  make("mine", 04777);  // root's own write keeps them (CAP_FSETID)
  L.Step("append(mine) as root", append("mine")());
  L.Stat("mine");
  make("tr", 04777);
  U.Do(a, "truncate(tr, 2)",
       [P] { return R(::truncate((P + "/tr").c_str(), 2)); });
  L.Stat("tr");
  make("ftr", 04777);
  U.Do(a, "ftruncate(ftr, 1)", [P] {
    const int fd = ::open((P + "/ftr").c_str(), O_WRONLY);
    if (fd < 0) return R(fd);
    const Res r = R(::ftruncate(fd, 1));
    ::close(fd);
    return r;
  });
  L.Stat("ftr");
  make("otr", 04777);
  U.Do(a, "open(otr, O_WRONLY|O_TRUNC)", [P] {
    const int fd = ::open((P + "/otr").c_str(), O_WRONLY | O_TRUNC);
    const Res r = R(fd);
    if (fd >= 0) ::close(fd);
    return r;
  });
  L.Stat("otr");
  make("fa", 04777);
  U.Do(a, "fallocate(fa, 0, 8192)", [P] {
    const int fd = ::open((P + "/fa").c_str(), O_WRONLY);
    if (fd < 0) return R(fd);
    const Res r = R(::fallocate(fd, 0, 0, 8192));
    ::close(fd);
    return r;
  });
  L.Stat("fa");
  // Two writes by the owner through one descriptor with her chmod between
  // them: the second write clears what the chmod set.
  L.MakeFile("twice", "data");
  L.Step("chown(twice, 60000, 60000)", R(::chown(L.C("twice"), 60000, 60000)));
  U.Do(b, "write; chmod(twice, 04777); write", [P] {
    const std::string f = P + "/twice";
    const int fd = ::open(f.c_str(), O_WRONLY);
    if (fd < 0) return R(fd);
    Res r = R(::pwrite(fd, "1", 1, 0));
    if (r.rc >= 0) r = R(::chmod(f.c_str(), 04777));
    struct stat st {};
    if (r.rc >= 0) r = R(::stat(f.c_str(), &st));
    if (r.rc >= 0 && !(st.st_mode & S_ISUID)) r = Res{-1, ENOTRECOVERABLE};
    if (r.rc >= 0) r = R(::pwrite(fd, "2", 1, 1));
    ::close(fd);
    return r;
  });
  L.Stat("twice");
  // File capabilities go too (security.capability, version 2, one
  // permitted capability).
  make("cap", 0755);
  {
    const uint32_t cap[5] = {0x02000000, 1u << 10, 0, 0, 0};
    L.Step(
        "setxattr(cap, security.capability)",
        R(::setxattr(L.C("cap"), "security.capability", cap, sizeof(cap), 0)));
  }
  L.Step("chmod(cap, 0777)", R(::chmod(L.C("cap"), 0777)));
  U.Do(a, "append(cap)", append("cap"));
  {
    char value[64];
    L.Step(
        "getxattr(cap, security.capability)",
        R(::getxattr(L.C("cap"), "security.capability", value, sizeof(value))),
        ENODATA);
  }
  // The owner's write, and a chown by the owner to another group of hers.
  L.MakeFile("own", "data");
  L.Step("chown(own, 60000, 60000)", R(::chown(L.C("own"), 60000, 60000)));
  L.Step("chmod(own, 06775)", R(::chmod(L.C("own"), 06775)));
  U.Do(b, "append(own)", append("own"));
  L.Stat("own");
  L.Step("chmod(own, 06775) again", R(::chmod(L.C("own"), 06775)));
  U.Do(b, "chown(own, -1, 60001)",
       [P] { return R(::chown((P + "/own").c_str(), -1, 60001)); });
  L.Stat("own");
  // Directories keep theirs (a write into one is no write of it).
  L.Step("mkdir(d, 02777)", R(::mkdir(L.C("d"), 0777)));
  L.Step("chmod(d, 02777)", R(::chmod(L.C("d"), 02777)));
  U.Creat(a, "d/f", 0644);
  L.Stat("d");
  return L.str();
}

// Operations through an open descriptor are judged by the access it was
// opened with, never by the file's mode now: a file created with mode 0,
// and one chmod'ed to 0 while open.
std::string IdentityDescriptorAccess(const std::string& root) {
  Log L(root);
  Users U(L);
  const User a = Nobody();
  const std::string P = root;
  L.Step("chmod(., 01777)", R(::chmod(L.C(""), 01777)));
  auto through = [P](const std::string& rel, bool create) {
    return [P, rel, create] {
      const std::string f = P + "/" + rel;
      const int fd = create ? ::open(f.c_str(), O_CREAT | O_EXCL | O_RDWR, 0)
                            : ::open(f.c_str(), O_RDWR);
      if (fd < 0) return R(fd);
      Res r{0, 0};
      if (!create) r = R(::chmod(f.c_str(), 0));
      if (r.rc >= 0) r = R(::ftruncate(fd, 100));
      if (r.rc >= 0) r = R(::pwrite(fd, "abc", 3, 10));
      if (r.rc >= 0) r = R(::fallocate(fd, 0, 0, 4096));
      if (r.rc >= 0) r = R(::ftruncate(fd, 50));
      char buf[3];
      if (r.rc >= 0) r = R(::pread(fd, buf, 3, 10));
      if (r.rc >= 0 && std::string(buf, 3) != "abc") r = Res{-1, EIO};
      if (r.rc >= 0) r = R(::fsync(fd));
      ::close(fd);
      return r;
    };
  };
  U.Do(a,
       "open(zero, O_CREAT|O_EXCL|O_RDWR, 0); ftruncate; pwrite; "
       "fallocate; ftruncate; pread; fsync",
       through("zero", true));
  L.Stat("zero");
  U.Creat(a, "later", 0600);
  U.Do(a,
       "open(later, O_RDWR); chmod(later, 0); ftruncate; pwrite; "
       "fallocate; ftruncate; pread; fsync",
       through("later", false));
  L.Stat("later");
  // The mode still counts for a new open and for a path.
  U.Do(
      a, "open(later, O_RDWR)",
      [P] {
        const int fd = ::open((P + "/later").c_str(), O_RDWR);
        const Res r = R(fd);
        if (fd >= 0) ::close(fd);
        return r;
      },
      EACCES);
  U.Do(
      a, "truncate(later, 0)",
      [P] { return R(::truncate((P + "/later").c_str(), 0)); }, EACCES);
  return L.str();
}

std::vector<Scenario> IdentityScenarios() {
  return {
      {"identity_owners", IdentityOwners},
      {"identity_setgid_dirs", IdentitySetgidDirs},
      {"identity_sticky", IdentitySticky},
      {"identity_search", IdentitySearch},
      {"identity_umask", IdentityUmask},
      {"identity_setid_clearing", IdentitySetidClearing},
      {"identity_descriptor_access", IdentityDescriptorAccess},
  };
}

}  // namespace sroute::testing

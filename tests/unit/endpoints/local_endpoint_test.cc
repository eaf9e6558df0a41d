// SPDX-License-Identifier: Apache-2.0
// Over 1 000 lines: one case per op and per path-safety rule on one fixture
// (an endpoint over a scratch directory).
#include "endpoints/local_endpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "sswitch/credentials.h"
#include "sswitch/io.h"
#include "util/errno_status.h"
#include "util/strings.h"

namespace sroute {
namespace {

std::string ReadHostFile(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteHostFile(const std::string& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << content;
}

struct UniqueFdForTest {
  explicit UniqueFdForTest(int fd) : fd(fd) {}
  ~UniqueFdForTest() {
    if (fd >= 0) ::close(fd);
  }
  int fd;
};

bool HostExists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

class LocalEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sroute_local_endpoint_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    root_ = base_ + "/root";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((base_ + "/outside").c_str(), 0755), 0);
    WriteHostFile(base_ + "/outside/secret", "SECRET");
    extra_before_ = Io::extra_completions.load();
    OpenEndpoint(LocalEndpoint::Options());
  }

  void TearDown() override {
    ep_.reset();
    EXPECT_EQ(Io::extra_completions.load(), extra_before_);
    std::error_code ec;
    std::filesystem::remove_all(base_, ec);
  }

  void OpenEndpoint(LocalEndpoint::Options options) {
    ep_.reset();
    auto ep = LocalEndpoint::Open(root_, options);
    ASSERT_TRUE(ep.ok()) << ep.status();
    ep_ = *std::move(ep);
  }

  // Submits `io` and checks that it completed exactly once, before Submit
  // returned.
  absl::Status Do(Io& io, std::string_view path) {
    int calls = 0;
    io.set_completion([&calls](Io&) { ++calls; });
    ep_->Submit(&io, path);
    EXPECT_EQ(calls, 1) << OpName(io.header.op) << " " << path;
    EXPECT_TRUE(io.completed());
    return io.status;
  }

  absl::Status Simple(Op op, std::string_view path,
                      const std::function<void(Io&)>& setup = {}) {
    Io io;
    io.header.op = op;
    if (setup) setup(io);
    return Do(io, path);
  }

  absl::Status Write(std::string_view path, uint64_t offset,
                     std::string_view data, uint64_t* bytes = nullptr) {
    Io io;
    io.header.op = Op::kWrite;
    io.header.offset = offset;
    io.header.length = data.size();
    io.write_data = std::span<const char>(data.data(), data.size());
    absl::Status s = Do(io, path);
    if (bytes != nullptr) *bytes = io.bytes;
    if (s.ok()) {
      EXPECT_EQ(io.bytes, data.size());
    }
    return s;
  }

  absl::Status Read(std::string_view path, uint64_t offset, size_t length,
                    std::string* out) {
    Io io;
    std::string buf(length, '\xAA');
    io.header.op = Op::kRead;
    io.header.offset = offset;
    io.header.length = length;
    io.read_buffer = std::span<char>(buf.data(), buf.size());
    absl::Status s = Do(io, path);
    if (s.ok()) {
      EXPECT_LE(io.bytes, length);
      buf.resize(io.bytes);
      *out = buf;
    }
    return s;
  }

  std::string ReadAll(std::string_view path) {
    std::string out;
    absl::Status s = Read(path, 0, 1 << 20, &out);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  absl::Status Getattr(std::string_view path, struct stat* st) {
    Io io;
    io.header.op = Op::kGetattr;
    absl::Status s = Do(io, path);
    *st = io.attr;
    return s;
  }

  absl::Status Create(std::string_view path, int flags, uint32_t mode,
                      struct stat* st = nullptr) {
    Io io;
    io.header.op = Op::kCreate;
    io.args.open_flags = flags;
    io.args.mode = mode;
    absl::Status s = Do(io, path);
    if (st != nullptr) *st = io.attr;
    return s;
  }

  absl::Status Mkdir(std::string_view path, uint32_t mode = 0755) {
    return Simple(Op::kMkdir, path, [&](Io& io) { io.args.mode = mode; });
  }

  absl::Status Symlink(std::string_view path, const std::string& text) {
    return Simple(Op::kSymlink, path,
                  [&](Io& io) { io.args.symlink_text = text; });
  }

  absl::Status Rename(std::string_view from, const std::string& to,
                      unsigned int flags = 0) {
    return Simple(Op::kRenameFrom, from, [&](Io& io) {
      io.args.second_file = to;
      io.args.rename_flags = flags;
    });
  }

  absl::Status Readdir(std::string_view path, std::vector<DirEntry>* out) {
    Io io;
    io.header.op = Op::kReaddir;
    absl::Status s = Do(io, path);
    *out = io.entries;
    std::sort(
        out->begin(), out->end(),
        [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return s;
  }

  absl::Status Setattr(std::string_view path, uint32_t to_set,
                       const std::function<void(IoArgs&)>& fill,
                       struct stat* st) {
    Io io;
    io.header.op = Op::kSetattr;
    io.args.to_set = to_set;
    fill(io.args);
    absl::Status s = Do(io, path);
    *st = io.attr;
    return s;
  }

  std::string base_;
  std::string root_;
  std::shared_ptr<LocalEndpoint> ep_;
  uint64_t extra_before_ = 0;
};

TEST_F(LocalEndpointTest, OpenRefusesMissingRootAndNonDirectory) {
  auto missing = LocalEndpoint::Open(base_ + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(ErrnoOf(missing.status()), ENOENT);
  EXPECT_NE(missing.status().message().find(base_ + "/nope"), std::string::npos)
      << missing.status();

  auto file = LocalEndpoint::Open(base_ + "/outside/secret");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(ErrnoOf(file.status()), ENOTDIR);
  EXPECT_NE(file.status().message().find("outside/secret"), std::string::npos);

  EXPECT_EQ(ep_->root(), root_);
}

TEST_F(LocalEndpointTest, WriteReadRoundTripShortReadsAndHoles) {
  ASSERT_TRUE(Create("f", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("f", 0, "hello").ok());
  ASSERT_TRUE(Write("f", 100, "world").ok());

  std::string got;
  ASSERT_TRUE(Read("f", 0, 5, &got).ok());
  EXPECT_EQ(got, "hello");
  ASSERT_TRUE(Read("f", 100, 5, &got).ok());
  EXPECT_EQ(got, "world");
  // A hole reads as zeros.
  ASSERT_TRUE(Read("f", 5, 95, &got).ok());
  EXPECT_EQ(got, std::string(95, '\0'));
  // Short read at EOF, and nothing past it.
  ASSERT_TRUE(Read("f", 102, 50, &got).ok());
  EXPECT_EQ(got, "rld");
  ASSERT_TRUE(Read("f", 105, 10, &got).ok());
  EXPECT_EQ(got, "");
  ASSERT_TRUE(Read("f", 1 << 20, 10, &got).ok());
  EXPECT_EQ(got, "");
  // Overwrite in the middle.
  ASSERT_TRUE(Write("f", 2, "LL").ok());
  ASSERT_TRUE(Read("f", 0, 5, &got).ok());
  EXPECT_EQ(got, "heLLo");
  // The bytes really are in the directory.
  std::string host = ReadHostFile(root_ + "/f");
  ASSERT_EQ(host.size(), 105u);
  EXPECT_EQ(host.substr(0, 5), "heLLo");
  EXPECT_EQ(host.substr(100), "world");

  // Reading a missing file, or a directory.
  EXPECT_EQ(ErrnoOf(Read("missing", 0, 1, &got)), ENOENT);
  ASSERT_TRUE(Mkdir("d").ok());
  EXPECT_EQ(ErrnoOf(Read("d", 0, 1, &got)), EISDIR);
  EXPECT_EQ(ErrnoOf(Write("d", 0, "x")), EISDIR);
  EXPECT_EQ(ErrnoOf(Read("", 0, 1, &got)), EISDIR);
}

TEST_F(LocalEndpointTest, Getattr) {
  ASSERT_TRUE(Create("f", O_WRONLY, 0640).ok());
  ASSERT_TRUE(Write("f", 0, "12345").ok());
  struct stat st;
  ASSERT_TRUE(Getattr("f", &st).ok());
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_size, 5);
  EXPECT_EQ(st.st_mode & 07777, 0640u);

  ASSERT_TRUE(Getattr("", &st).ok());
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  struct stat host;
  ASSERT_EQ(::stat(root_.c_str(), &host), 0);
  EXPECT_EQ(st.st_ino, host.st_ino);

  absl::Status s = Getattr("nope/f", &st);
  EXPECT_EQ(ErrnoOf(s), ENOENT);
  EXPECT_NE(s.message().find(root_ + "/nope/f"), std::string::npos) << s;
  EXPECT_EQ(ErrnoOf(Getattr("f/x", &st)), ENOTDIR);

  Io io;
  io.header.op = Op::kLookup;
  ASSERT_TRUE(Do(io, "f").ok());
  EXPECT_EQ(io.attr.st_size, 5);
}

TEST_F(LocalEndpointTest, CreateExclusiveTwiceGivesEexist) {
  struct stat st;
  ASSERT_TRUE(Create("f", O_RDWR | O_EXCL, 0600, &st).ok());
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  absl::Status s = Create("f", O_RDWR | O_EXCL, 0600);
  EXPECT_EQ(ErrnoOf(s), EEXIST) << s;
  // Without O_EXCL an existing file is opened; O_TRUNC empties it.
  ASSERT_TRUE(Write("f", 0, "data").ok());
  ASSERT_TRUE(Create("f", O_RDWR, 0600, &st).ok());
  EXPECT_EQ(st.st_size, 4);
  ASSERT_TRUE(Create("f", O_WRONLY | O_TRUNC, 0600, &st).ok());
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(ReadAll("f"), "");
  // Create in a missing directory.
  EXPECT_EQ(ErrnoOf(Create("nodir/f", O_RDWR, 0600)), ENOENT);
}

TEST_F(LocalEndpointTest, MkdirReaddirRmdir) {
  ASSERT_TRUE(Mkdir("d").ok());
  EXPECT_EQ(ErrnoOf(Mkdir("d")), EEXIST);
  ASSERT_TRUE(Create("d/a", O_RDWR, 0644).ok());
  ASSERT_TRUE(Create("d/b", O_RDWR, 0644).ok());
  ASSERT_TRUE(Mkdir("d/sub", 0700).ok());
  struct stat st;
  ASSERT_TRUE(Getattr("d/sub", &st).ok());
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);

  std::vector<DirEntry> entries;
  ASSERT_TRUE(Readdir("d", &entries).ok());
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name, "a");
  EXPECT_EQ(entries[0].type, DT_REG);
  EXPECT_EQ(entries[1].name, "b");
  EXPECT_EQ(entries[2].name, "sub");
  EXPECT_EQ(entries[2].type, DT_DIR);
  EXPECT_EQ(entries[2].ino, st.st_ino);

  ASSERT_TRUE(Readdir("", &entries).ok());
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].name, "d");
  EXPECT_EQ(ErrnoOf(Readdir("d/a", &entries)), ENOTDIR);
  EXPECT_EQ(ErrnoOf(Readdir("nope", &entries)), ENOENT);

  absl::Status s = Simple(Op::kRmdir, "d");
  EXPECT_EQ(ErrnoOf(s), ENOTEMPTY) << s;
  EXPECT_EQ(ErrnoOf(Simple(Op::kRmdir, "d/a")), ENOTDIR);
  EXPECT_EQ(ErrnoOf(Simple(Op::kUnlink, "d/sub")), EISDIR);
  ASSERT_TRUE(Simple(Op::kUnlink, "d/a").ok());
  ASSERT_TRUE(Simple(Op::kUnlink, "d/b").ok());
  ASSERT_TRUE(Simple(Op::kRmdir, "d/sub").ok());
  ASSERT_TRUE(Simple(Op::kRmdir, "d").ok());
  EXPECT_EQ(ErrnoOf(Getattr("d", &st)), ENOENT);
  EXPECT_FALSE(HostExists(root_ + "/d"));

  // The root itself can be neither removed nor renamed.
  EXPECT_EQ(ErrnoOf(Simple(Op::kRmdir, "")), EBUSY);
  EXPECT_EQ(ErrnoOf(Simple(Op::kUnlink, "")), EBUSY);
  EXPECT_EQ(ErrnoOf(Rename("", "x")), EBUSY);
  EXPECT_TRUE(HostExists(root_));
}

TEST_F(LocalEndpointTest, UnlinkInvalidatesCachedFd) {
  ASSERT_TRUE(Create("f", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("f", 0, "abc").ok());
  EXPECT_EQ(ReadAll("f"), "abc");
  EXPECT_GE(ep_->open_files(), 1u);
  ASSERT_TRUE(Simple(Op::kUnlink, "f").ok());
  EXPECT_EQ(ep_->open_files(), 0u);
  std::string got;
  EXPECT_EQ(ErrnoOf(Read("f", 0, 3, &got)), ENOENT);
  EXPECT_EQ(ErrnoOf(Write("f", 0, "x")), ENOENT);
  EXPECT_EQ(ErrnoOf(Simple(Op::kUnlink, "f")), ENOENT);

  // A name reached through a symlink is another name of the same inode: it
  // goes stale too.
  ASSERT_TRUE(Mkdir("d").ok());
  ASSERT_TRUE(Create("d/g", O_RDWR, 0644).ok());
  ASSERT_TRUE(Symlink("link", "d").ok());
  ASSERT_TRUE(Write("link/g", 0, "via link").ok());
  EXPECT_EQ(ReadAll("d/g"), "via link");
  ASSERT_TRUE(Simple(Op::kUnlink, "d/g").ok());
  EXPECT_EQ(ErrnoOf(Read("link/g", 0, 3, &got)), ENOENT);

  // A recreated name reaches the new file, not the old fd.
  ASSERT_TRUE(Create("d/g", O_RDWR | O_EXCL, 0644).ok());
  ASSERT_TRUE(Write("d/g", 0, "new").ok());
  EXPECT_EQ(ReadAll("link/g"), "new");
  // Removing the symlink makes names through it stale.
  ASSERT_TRUE(Simple(Op::kUnlink, "link").ok());
  EXPECT_EQ(ErrnoOf(Read("link/g", 0, 3, &got)), ENOENT);
  EXPECT_EQ(ReadAll("d/g"), "new");
}

TEST_F(LocalEndpointTest, RenameMovesFilesAndDirectories) {
  ASSERT_TRUE(Create("a", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("a", 0, "content").ok());
  EXPECT_EQ(ReadAll("a"), "content");
  ASSERT_TRUE(Rename("a", "b").ok());
  std::string got;
  EXPECT_EQ(ErrnoOf(Read("a", 0, 1, &got)), ENOENT);
  EXPECT_EQ(ReadAll("b"), "content");

  // Replacing an existing (cached) file: the new name sees the moved file.
  ASSERT_TRUE(Create("c", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("c", 0, "old c").ok());
  EXPECT_EQ(ReadAll("c"), "old c");
  ASSERT_TRUE(Rename("b", "c").ok());
  EXPECT_EQ(ReadAll("c"), "content");
  EXPECT_EQ(ErrnoOf(Read("b", 0, 1, &got)), ENOENT);

  // RENAME_NOREPLACE and RENAME_EXCHANGE.
  ASSERT_TRUE(Create("e", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("e", 0, "eee").ok());
  EXPECT_EQ(ErrnoOf(Rename("e", "c", RENAME_NOREPLACE)), EEXIST);
  ASSERT_TRUE(Rename("e", "c", RENAME_EXCHANGE).ok());
  EXPECT_EQ(ReadAll("c"), "eee");
  EXPECT_EQ(ReadAll("e"), "content");

  // A directory with cached files beneath it.
  ASSERT_TRUE(Mkdir("d").ok());
  ASSERT_TRUE(Mkdir("d/s").ok());
  ASSERT_TRUE(Create("d/s/x", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("d/s/x", 0, "deep").ok());
  EXPECT_EQ(ReadAll("d/s/x"), "deep");
  ASSERT_TRUE(Rename("d", "d2").ok());
  EXPECT_EQ(ErrnoOf(Read("d/s/x", 0, 1, &got)), ENOENT);
  EXPECT_EQ(ReadAll("d2/s/x"), "deep");

  // rename_to is the mirror: the path is the new name.
  ASSERT_TRUE(Simple(Op::kRenameTo, "d3", [](Io& io) {
                io.args.second_file = "d2";
              }).ok());
  EXPECT_EQ(ReadAll("d3/s/x"), "deep");
  EXPECT_EQ(ErrnoOf(Read("d2/s/x", 0, 1, &got)), ENOENT);

  EXPECT_EQ(ErrnoOf(Rename("missing", "z")), ENOENT);
}

TEST_F(LocalEndpointTest, SymlinkReadlinkAndLinks) {
  ASSERT_TRUE(Symlink("l", "some/target").ok());
  Io io;
  io.header.op = Op::kReadlink;
  ASSERT_TRUE(Do(io, "l").ok());
  EXPECT_EQ(io.data, "some/target");
  struct stat st;
  ASSERT_TRUE(Getattr("l", &st).ok());
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(ErrnoOf(Symlink("l", "x")), EEXIST);

  // A long link text.
  const std::string long_text(1000, 'z');
  ASSERT_TRUE(Symlink("long", long_text).ok());
  Io io2;
  io2.header.op = Op::kReadlink;
  ASSERT_TRUE(Do(io2, "long").ok());
  EXPECT_EQ(io2.data, long_text);

  ASSERT_TRUE(Create("f", O_RDWR, 0644).ok());
  Io io3;
  io3.header.op = Op::kReadlink;
  EXPECT_EQ(ErrnoOf(Do(io3, "f")), EINVAL);

  // Symlinks that stay inside the root are followed for data IO.
  ASSERT_TRUE(Mkdir("dir").ok());
  ASSERT_TRUE(Create("dir/file", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("dir/file", 0, "inside").ok());
  ASSERT_TRUE(Symlink("in", "dir/file").ok());
  ASSERT_TRUE(Symlink("dl", "dir").ok());
  ASSERT_TRUE(Symlink("dir/up", "../dir/file").ok());
  EXPECT_EQ(ReadAll("in"), "inside");
  EXPECT_EQ(ReadAll("dl/file"), "inside");
  EXPECT_EQ(ReadAll("dir/up"), "inside");
  ASSERT_TRUE(Write("in", 6, "!").ok());
  EXPECT_EQ(ReadHostFile(root_ + "/dir/file"), "inside!");

  // Hard links, including of a symlink itself.
  Io link;
  link.header.op = Op::kLink;
  link.args.second_file = "dir/file";
  ASSERT_TRUE(Do(link, "hard").ok());
  EXPECT_EQ(link.attr.st_nlink, 2u);
  EXPECT_EQ(ReadAll("hard"), "inside!");
  Io link2;
  link2.header.op = Op::kLink;
  link2.args.second_file = "in";
  ASSERT_TRUE(Do(link2, "in2").ok());
  EXPECT_TRUE(S_ISLNK(link2.attr.st_mode));
  Io link3;
  link3.header.op = Op::kLink;
  link3.args.second_file = "dir/file";
  EXPECT_EQ(ErrnoOf(Do(link3, "hard")), EEXIST);

  // mknod: a FIFO.
  Io mknod;
  mknod.header.op = Op::kMknod;
  mknod.args.mode = S_IFIFO | 0600;
  ASSERT_TRUE(Do(mknod, "fifo").ok());
  EXPECT_TRUE(S_ISFIFO(mknod.attr.st_mode));
}

// The escape tests aim every op that could change something at files of the
// test's own temp dir, never at system files: if the confinement ever broke,
// they must fail without doing harm. System paths ("/etc") are only used with
// read-only ops, and only after a read through them was refused.
TEST_F(LocalEndpointTest, RefusesPathsThatLeaveTheRoot) {
  ASSERT_TRUE(Mkdir("a").ok());
  std::string got;
  struct stat st;
  for (const char* p : {"/etc/passwd", "/etc", "/"}) {
    SCOPED_TRACE(p);
    absl::Status s = Read(p, 0, 10, &got);
    ASSERT_EQ(ErrnoOf(s), EXDEV) << s;
    EXPECT_NE(s.message().find("escapes the endpoint root"), std::string::npos)
        << s;
    EXPECT_EQ(ErrnoOf(Getattr(p, &st)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kStatfs, p)), EXDEV);
  }
  const std::string abs_secret = base_ + "/outside/secret";
  const std::string abs_new = base_ + "/outside/new";
  for (const std::string& p : std::vector<std::string>{
           "../x", "a/../../x", "..", "a/..", "../outside/secret",
           "a/../../outside/secret", abs_secret, abs_new}) {
    SCOPED_TRACE(p);
    absl::Status s = Read(p, 0, 10, &got);
    ASSERT_EQ(ErrnoOf(s), EXDEV) << s;
    EXPECT_NE(s.message().find("escapes the endpoint root"), std::string::npos)
        << s;
    EXPECT_EQ(ErrnoOf(Write(p, 0, "x")), EXDEV);
    EXPECT_EQ(ErrnoOf(Create(p, O_RDWR | O_TRUNC, 0644)), EXDEV);
    EXPECT_EQ(ErrnoOf(Getattr(p, &st)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kUnlink, p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kRmdir, p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Mkdir(p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Rename("a", p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Rename(p, "a2")), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kLink, "stolen",
                             [&](Io& io) { io.args.second_file = p; })),
              EXDEV);
  }
  for (const char* p : {"a/./b", "./a", "a//b", "a/", "."}) {
    SCOPED_TRACE(p);
    EXPECT_EQ(ErrnoOf(Read(p, 0, 10, &got)), EINVAL);
    EXPECT_EQ(ErrnoOf(Mkdir(p)), EINVAL);
  }
  EXPECT_EQ(ErrnoOf(Read(std::string_view("a\0b", 3), 0, 1, &got)), EINVAL);
  EXPECT_EQ(ReadHostFile(abs_secret), "SECRET");
  EXPECT_FALSE(HostExists(abs_new));
  EXPECT_FALSE(HostExists(base_ + "/x"));
  EXPECT_FALSE(HostExists(root_ + "/stolen"));
  EXPECT_FALSE(HostExists(root_ + "/a2"));
  EXPECT_TRUE(HostExists(root_ + "/a"));
}

TEST_F(LocalEndpointTest, SymlinksThatLeaveTheRootAreNotFollowed) {
  // Read-only probes through links to system paths.
  ASSERT_TRUE(Symlink("etc", "/etc").ok());
  ASSERT_TRUE(Symlink("passwd", "/etc/passwd").ok());
  // Everything else points into the test's own "outside" dir.
  ASSERT_TRUE(Symlink("abs", base_ + "/outside").ok());
  ASSERT_TRUE(Symlink("abs_file", base_ + "/outside/secret").ok());
  ASSERT_TRUE(Symlink("up", "../outside").ok());
  ASSERT_TRUE(Symlink("upup", "../../").ok());
  ASSERT_TRUE(Symlink("esc", "../outside/secret").ok());
  ASSERT_TRUE(Mkdir("d").ok());
  ASSERT_TRUE(Symlink("d/deep", "../../outside").ok());
  ASSERT_TRUE(Symlink("chain", "d/deep").ok());
  struct stat st;
  std::string got;
  std::vector<DirEntry> entries;

  for (const char* p : {"etc/passwd", "passwd", "etc"}) {
    SCOPED_TRACE(p);
    absl::Status s = Read(p, 0, 10, &got);
    ASSERT_EQ(ErrnoOf(s), EXDEV) << s;
    EXPECT_NE(s.message().find("escapes the endpoint root"), std::string::npos)
        << s;
    EXPECT_EQ(ErrnoOf(Simple(Op::kOpen, p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kStatfs, p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Readdir(p, &entries)), EXDEV);
  }
  EXPECT_EQ(ErrnoOf(Getattr("etc/passwd", &st)), EXDEV);
  EXPECT_EQ(ErrnoOf(Simple(Op::kGetxattr, "etc/passwd",
                           [](Io& io) { io.args.xattr_name = "user.x"; })),
            EXDEV);

  const std::vector<std::string> files = {
      "abs/secret",
      "abs_file",
      "up/secret",
      "esc",
      "d/deep/secret",
      "chain/secret",
      StrCat("upup/", base_.substr(5), "/outside/secret")};
  // Refused reads first: nothing below runs if the confinement is broken.
  for (const std::string& p : files) {
    SCOPED_TRACE(p);
    absl::Status s = Read(p, 0, 10, &got);
    ASSERT_EQ(ErrnoOf(s), EXDEV) << s;
    EXPECT_NE(s.message().find("escapes the endpoint root"), std::string::npos)
        << s;
  }
  for (const std::string& p : files) {
    SCOPED_TRACE(p);
    EXPECT_EQ(ErrnoOf(Write(p, 0, "PWNED")), EXDEV);
    EXPECT_EQ(ErrnoOf(Create(p, O_RDWR | O_TRUNC, 0644)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kTruncate, p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kFallocate, p,
                             [](Io& io) { io.header.length = 4096; })),
              EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(
                  Op::kOpen, p,
                  [](Io& io) { io.args.open_flags = O_WRONLY | O_TRUNC; })),
              EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kStatfs, p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kFsync, p)), EXDEV);
  }
  // Ops on names beneath an escaping directory symlink.
  for (const char* p : {"up/secret", "abs/secret", "up/new", "abs/new"}) {
    SCOPED_TRACE(p);
    EXPECT_EQ(ErrnoOf(Getattr(p, &st)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kUnlink, p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Mkdir(p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Symlink(p, "x")), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kMknod, p,
                             [](Io& io) { io.args.mode = S_IFIFO | 0600; })),
              EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kReadlink, p)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kGetxattr, p,
                             [](Io& io) { io.args.xattr_name = "user.x"; })),
              EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kSetxattr, p,
                             [](Io& io) { io.args.xattr_name = "user.x"; })),
              EXDEV);
    EXPECT_EQ(ErrnoOf(Setattr(
                  p, kSetMode | kSetSize | kSetMtime,
                  [](IoArgs& a) {
                    a.mode = 0777;
                    a.mtime = {1, 0};
                  },
                  &st)),
              EXDEV);
    EXPECT_EQ(ErrnoOf(Readdir(p, &entries)), EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kLink, "stolen",
                             [&](Io& io) { io.args.second_file = p; })),
              EXDEV);
    EXPECT_EQ(ErrnoOf(Simple(Op::kLink, p,
                             [&](Io& io) { io.args.second_file = "d"; })),
              EXDEV);
    EXPECT_EQ(ErrnoOf(Rename(p, "stolen")), EXDEV);
  }
  EXPECT_EQ(ErrnoOf(Readdir("up", &entries)), EXDEV);
  EXPECT_EQ(ErrnoOf(Readdir("abs", &entries)), EXDEV);
  // Moving a file into an escaping directory.
  ASSERT_TRUE(Create("mine", O_RDWR, 0644).ok());
  EXPECT_EQ(ErrnoOf(Rename("mine", "up/mine")), EXDEV);
  EXPECT_EQ(ErrnoOf(Rename("mine", "abs/mine")), EXDEV);

  // The symlinks themselves are inside the root: lstat, readlink, setattr of
  // times, and unlink act on the link, never on what it points to.
  ASSERT_TRUE(Getattr("esc", &st).ok());
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  struct stat before;
  ASSERT_EQ(::stat((base_ + "/outside/secret").c_str(), &before), 0);
  ASSERT_TRUE(Setattr(
                  "abs_file", kSetMtime,
                  [](IoArgs& a) {
                    a.mtime = {12345, 0};
                  },
                  &st)
                  .ok());
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(st.st_mtim.tv_sec, 12345);
  EXPECT_EQ(ErrnoOf(Setattr(
                "esc", kSetMode, [](IoArgs& a) { a.mode = 0777; }, &st)),
            EOPNOTSUPP);
  EXPECT_EQ(ErrnoOf(Setattr(
                "abs_file", kSetSize, [](IoArgs& a) { a.size = 0; }, &st)),
            EINVAL);
  ASSERT_TRUE(Simple(Op::kLink, "esc2", [](Io& io) {
                io.args.second_file = "esc";
              }).ok());
  ASSERT_TRUE(Simple(Op::kUnlink, "esc").ok());
  ASSERT_TRUE(Simple(Op::kUnlink, "up").ok());
  ASSERT_TRUE(Simple(Op::kUnlink, "abs").ok());

  // Nothing outside was touched.
  struct stat after;
  ASSERT_EQ(::stat((base_ + "/outside/secret").c_str(), &after), 0);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mode, before.st_mode);
  EXPECT_EQ(ReadHostFile(base_ + "/outside/secret"), "SECRET");
  std::vector<std::string> outside;
  for (auto& e : std::filesystem::directory_iterator(base_ + "/outside")) {
    outside.push_back(e.path().filename().string());
  }
  EXPECT_EQ(outside, std::vector<std::string>{"secret"});
  EXPECT_FALSE(HostExists(root_ + "/stolen"));
  EXPECT_TRUE(HostExists(base_ + "/outside"));
}

TEST_F(LocalEndpointTest, SetattrChmodChownTruncateUtimens) {
  struct stat st;
  ASSERT_TRUE(Create("f", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("f", 0, "0123456789").ok());
  EXPECT_EQ(ReadAll("f"), "0123456789");  // cached fd

  ASSERT_TRUE(Setattr(
                  "f", kSetMode, [](IoArgs& a) { a.mode = 0600; }, &st)
                  .ok());
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_TRUE(S_ISREG(st.st_mode));

  ASSERT_TRUE(Setattr(
                  "f", kSetSize, [](IoArgs& a) { a.size = 3; }, &st)
                  .ok());
  EXPECT_EQ(st.st_size, 3);
  EXPECT_EQ(ReadAll("f"), "012");
  ASSERT_TRUE(Setattr(
                  "f", kSetSize, [](IoArgs& a) { a.size = 5; }, &st)
                  .ok());
  EXPECT_EQ(ReadAll("f"), std::string("012\0\0", 5));

  ASSERT_TRUE(Setattr(
                  "f", kSetAtime | kSetMtime,
                  [](IoArgs& a) {
                    a.atime = {1000, 5};
                    a.mtime = {2000, 7};
                  },
                  &st)
                  .ok());
  EXPECT_EQ(st.st_atim.tv_sec, 1000);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 7);
  // UTIME_OMIT and UTIME_NOW pass through.
  ASSERT_TRUE(Setattr(
                  "f", kSetAtime | kSetMtime,
                  [](IoArgs& a) {
                    a.atime = {0, UTIME_NOW};
                    a.mtime = {0, UTIME_OMIT};
                  },
                  &st)
                  .ok());
  EXPECT_GT(st.st_atim.tv_sec, 1000);
  EXPECT_EQ(st.st_mtim.tv_sec, 2000);

  // Several fields at once: truncate, chmod, mtime (the truncate does not
  // override the requested mtime).
  ASSERT_TRUE(Setattr(
                  "f", kSetSize | kSetMode | kSetMtime,
                  [](IoArgs& a) {
                    a.size = 1;
                    a.mode = 0640;
                    a.mtime = {3000, 0};
                  },
                  &st)
                  .ok());
  EXPECT_EQ(st.st_size, 1);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtim.tv_sec, 3000);

  if (::geteuid() == 0) {
    ASSERT_TRUE(Setattr(
                    "f", kSetUid | kSetGid,
                    [](IoArgs& a) {
                      a.uid = 1234;
                      a.gid = 5678;
                    },
                    &st)
                    .ok());
    EXPECT_EQ(st.st_uid, 1234u);
    EXPECT_EQ(st.st_gid, 5678u);
    ASSERT_TRUE(Setattr(
                    "f", kSetGid, [](IoArgs& a) { a.gid = 42; }, &st)
                    .ok());
    EXPECT_EQ(st.st_uid, 1234u);
    EXPECT_EQ(st.st_gid, 42u);
    // A symlink is chowned itself.
    ASSERT_TRUE(Symlink("l", "f").ok());
    ASSERT_TRUE(Setattr(
                    "l", kSetUid, [](IoArgs& a) { a.uid = 99; }, &st)
                    .ok());
    EXPECT_TRUE(S_ISLNK(st.st_mode));
    EXPECT_EQ(st.st_uid, 99u);
    struct stat host;
    ASSERT_EQ(::stat((root_ + "/f").c_str(), &host), 0);
    EXPECT_EQ(host.st_uid, 1234u);
  }

  // A directory, and the root.
  ASSERT_TRUE(Mkdir("d").ok());
  ASSERT_TRUE(Setattr(
                  "d", kSetMode, [](IoArgs& a) { a.mode = 0711; }, &st)
                  .ok());
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  EXPECT_EQ(ErrnoOf(Setattr(
                "d", kSetSize, [](IoArgs& a) { a.size = 0; }, &st)),
            EISDIR);
  ASSERT_TRUE(Setattr(
                  "", kSetMtime,
                  [](IoArgs& a) {
                    a.mtime = {4000, 0};
                  },
                  &st)
                  .ok());
  EXPECT_EQ(st.st_mtim.tv_sec, 4000);
  EXPECT_EQ(ErrnoOf(Setattr(
                "missing", kSetMode, [](IoArgs& a) { a.mode = 0600; }, &st)),
            ENOENT);

  // The truncate op.
  ASSERT_TRUE(Write("f", 0, "abcdef").ok());
  Io trunc;
  trunc.header.op = Op::kTruncate;
  trunc.args.size = 2;
  ASSERT_TRUE(Do(trunc, "f").ok());
  EXPECT_EQ(trunc.attr.st_size, 2);
  EXPECT_EQ(ReadAll("f"), "ab");
}

TEST_F(LocalEndpointTest, Xattrs) {
  ASSERT_TRUE(Create("f", O_RDWR, 0644).ok());
  const std::string value = std::string("v\0lue", 5);
  absl::Status s = Simple(Op::kSetxattr, "f", [&](Io& io) {
    io.args.xattr_name = "user.test";
    io.write_data = std::span<const char>(value.data(), value.size());
  });
  if (ErrnoOf(s) == ENOTSUP) GTEST_SKIP() << "no user xattrs here: " << s;
  ASSERT_TRUE(s.ok()) << s;

  Io get;
  get.header.op = Op::kGetxattr;
  get.args.xattr_name = "user.test";
  ASSERT_TRUE(Do(get, "f").ok());
  EXPECT_EQ(get.data, value);

  // XATTR_CREATE on an existing name.
  EXPECT_EQ(ErrnoOf(Simple(Op::kSetxattr, "f",
                           [&](Io& io) {
                             io.args.xattr_name = "user.test";
                             io.args.xattr_flags = XATTR_CREATE;
                           })),
            EEXIST);
  ASSERT_TRUE(Simple(Op::kSetxattr, "f", [&](Io& io) {
                io.args.xattr_name = "user.second";
              }).ok());

  Io list;
  list.header.op = Op::kListxattr;
  ASSERT_TRUE(Do(list, "f").ok());
  std::vector<std::string> names;
  for (std::string_view n : StrSplit(list.data, '\0')) {
    if (!n.empty() && n.substr(0, 5) == "user.") names.emplace_back(n);
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"user.second", "user.test"}));

  Io empty;
  empty.header.op = Op::kGetxattr;
  empty.args.xattr_name = "user.second";
  ASSERT_TRUE(Do(empty, "f").ok());
  EXPECT_EQ(empty.data, "");

  ASSERT_TRUE(Simple(Op::kRemovexattr, "f", [](Io& io) {
                io.args.xattr_name = "user.test";
              }).ok());
  Io gone;
  gone.header.op = Op::kGetxattr;
  gone.args.xattr_name = "user.test";
  EXPECT_EQ(ErrnoOf(Do(gone, "f")), ENODATA);
  EXPECT_EQ(ErrnoOf(Simple(Op::kRemovexattr, "f",
                           [](Io& io) { io.args.xattr_name = "user.test"; })),
            ENODATA);

  // On a directory, on the root, and in a subdirectory.
  ASSERT_TRUE(Mkdir("d").ok());
  ASSERT_TRUE(Create("d/g", O_RDWR, 0644).ok());
  for (const char* p : {"d", "", "d/g"}) {
    SCOPED_TRACE(p);
    ASSERT_TRUE(Simple(Op::kSetxattr, p, [&](Io& io) {
                  io.args.xattr_name = "user.k";
                  io.write_data = std::span<const char>(p, strlen(p));
                }).ok());
    Io g;
    g.header.op = Op::kGetxattr;
    g.args.xattr_name = "user.k";
    ASSERT_TRUE(Do(g, p).ok());
    EXPECT_EQ(g.data, p);
  }
  char host[16] = {};
  ASSERT_EQ(::getxattr((root_ + "/d/g").c_str(), "user.k", host, sizeof(host)),
            3);
  EXPECT_STREQ(host, "d/g");

  // A symlink is not followed: user xattrs are not allowed on symlinks.
  ASSERT_TRUE(Symlink("l", "f").ok());
  EXPECT_EQ(ErrnoOf(Simple(Op::kSetxattr, "l",
                           [](Io& io) { io.args.xattr_name = "user.x"; })),
            EPERM);
  EXPECT_EQ(ErrnoOf(Simple(Op::kGetxattr, "missing",
                           [](Io& io) { io.args.xattr_name = "user.x"; })),
            ENOENT);
  EXPECT_EQ(ErrnoOf(Simple(Op::kGetxattr, "f")), EINVAL);  // no name
}

TEST_F(LocalEndpointTest, FallocateFsyncStatfsOpen) {
  ASSERT_TRUE(Create("f", O_RDWR, 0644).ok());
  absl::Status s = Simple(Op::kFallocate, "f", [](Io& io) {
    io.header.offset = 0;
    io.header.length = 1 << 20;
  });
  ASSERT_TRUE(s.ok()) << s;
  struct stat st;
  ASSERT_TRUE(Getattr("f", &st).ok());
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_GE(st.st_blocks * 512, 1 << 20);
  s = Simple(Op::kFallocate, "f", [](Io& io) {
    io.args.fallocate_mode = FALLOC_FL_KEEP_SIZE;
    io.header.offset = 1 << 20;
    io.header.length = 1 << 20;
  });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(Getattr("f", &st).ok());
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_EQ(ErrnoOf(Simple(Op::kFallocate, "f",
                           [](Io& io) { io.header.length = 0; })),
            EINVAL);

  ASSERT_TRUE(Simple(Op::kFsync, "f").ok());
  ASSERT_TRUE(
      Simple(Op::kFsync, "f", [](Io& io) { io.args.datasync = true; }).ok());
  ASSERT_TRUE(Mkdir("d").ok());
  ASSERT_TRUE(Simple(Op::kFsync, "d").ok());
  ASSERT_TRUE(Simple(Op::kFsync, "").ok());
  EXPECT_EQ(ErrnoOf(Simple(Op::kFsync, "missing")), ENOENT);

  Io statfs;
  statfs.header.op = Op::kStatfs;
  ASSERT_TRUE(Do(statfs, "").ok());
  ASSERT_EQ(statfs.data.size(), sizeof(struct statvfs));
  struct statvfs sv;
  std::memcpy(&sv, statfs.data.data(), sizeof(sv));
  struct statvfs host;
  ASSERT_EQ(::statvfs(root_.c_str(), &host), 0);
  EXPECT_EQ(sv.f_bsize, host.f_bsize);
  EXPECT_EQ(sv.f_blocks, host.f_blocks);
  EXPECT_EQ(sv.f_fsid, host.f_fsid);
  Io statfs2;
  statfs2.header.op = Op::kStatfs;
  ASSERT_TRUE(Do(statfs2, "d").ok());
  EXPECT_EQ(statfs2.data.size(), sizeof(struct statvfs));

  // open: checks existence and type; O_TRUNC with write access truncates.
  auto open = [&](std::string_view p, int flags, struct stat* out) {
    Io io;
    io.header.op = Op::kOpen;
    io.args.open_flags = flags;
    absl::Status r = Do(io, p);
    if (out != nullptr) *out = io.attr;
    return r;
  };
  ASSERT_TRUE(open("f", O_RDONLY, &st).ok());
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_EQ(ErrnoOf(open("missing", O_RDONLY, nullptr)), ENOENT);
  EXPECT_EQ(ErrnoOf(open("f", O_RDONLY | O_DIRECTORY, nullptr)), ENOTDIR);
  EXPECT_EQ(ErrnoOf(open("d", O_RDWR, nullptr)), EISDIR);
  ASSERT_TRUE(open("d", O_RDONLY | O_DIRECTORY, nullptr).ok());
  ASSERT_TRUE(Symlink("l", "f").ok());
  EXPECT_EQ(ErrnoOf(open("l", O_RDONLY | O_NOFOLLOW, nullptr)), ELOOP);
  ASSERT_TRUE(open("l", O_RDONLY, &st).ok());
  EXPECT_TRUE(S_ISREG(st.st_mode));
  ASSERT_TRUE(open("f", O_RDONLY | O_TRUNC, &st).ok());
  EXPECT_EQ(st.st_size, 1 << 20);
  ASSERT_TRUE(open("f", O_WRONLY | O_TRUNC, &st).ok());
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(ReadAll("f"), "");
}

TEST_F(LocalEndpointTest, ReadOnlyFileIsReadThroughReadOnlyFd) {
  ASSERT_TRUE(Create("ro", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("ro", 0, "frozen").ok());
  // Start with an empty cache so the next read has to open the file again.
  OpenEndpoint(LocalEndpoint::Options());
  const std::string host = root_ + "/ro";
  int expect_err = EACCES;
  // Clears the immutable flag again however the test ends, so the temp dir
  // can be removed.
  struct Thaw {
    std::string path;
    ~Thaw() {
      if (path.empty()) return;
      UniqueFdForTest fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      int flags = 0;
      if (fd.fd >= 0 && ::ioctl(fd.fd, FS_IOC_GETFLAGS, &flags) == 0) {
        flags &= ~FS_IMMUTABLE_FL;
        ::ioctl(fd.fd, FS_IOC_SETFLAGS, &flags);
      }
    }
  } thaw;
  if (::geteuid() == 0) {
    // Root may open any mode for writing; an immutable file it may not.
    UniqueFdForTest fd(::open(host.c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_GE(fd.fd, 0);
    int flags = 0;
    if (::ioctl(fd.fd, FS_IOC_GETFLAGS, &flags) != 0) {
      GTEST_SKIP() << "no inode flags here";
    }
    flags |= FS_IMMUTABLE_FL;
    if (::ioctl(fd.fd, FS_IOC_SETFLAGS, &flags) != 0) {
      GTEST_SKIP() << "cannot set the immutable flag here";
    }
    thaw.path = host;
    expect_err = EPERM;
  } else {
    ASSERT_EQ(::chmod(host.c_str(), 0444), 0);
  }
  EXPECT_EQ(ReadAll("ro"), "frozen");
  EXPECT_EQ(ReadAll("ro"), "frozen");  // from the cached read-only fd
  EXPECT_EQ(ErrnoOf(Write("ro", 0, "x")), expect_err);
  EXPECT_EQ(ErrnoOf(Simple(Op::kTruncate, "ro")), expect_err);
  ASSERT_TRUE(Simple(Op::kFsync, "ro").ok());
  EXPECT_EQ(ReadAll("ro"), "frozen");
}

TEST_F(LocalEndpointTest, OpenFilesStayBounded) {
  LocalEndpoint::Options options;
  options.max_open_files = 4;
  OpenEndpoint(options);
  EXPECT_EQ(ep_->open_files(), 0u);
  for (int i = 0; i < 100; ++i) {
    const std::string name = StrCat("f", i);
    ASSERT_TRUE(Create(name, O_RDWR, 0644).ok());
    EXPECT_LE(ep_->open_files(), 4u);
    ASSERT_TRUE(Write(name, 0, StrCat("content ", i)).ok());
    EXPECT_LE(ep_->open_files(), 4u);
    ASSERT_EQ(ReadAll(name), StrCat("content ", i));
    EXPECT_LE(ep_->open_files(), 4u);
  }
  for (int i = 99; i >= 0; --i) {
    ASSERT_EQ(ReadAll(StrCat("f", i)), StrCat("content ", i));
    EXPECT_LE(ep_->open_files(), 4u);
  }
  EXPECT_GE(ep_->open_files(), 1u);
  // How many fds the process really has: no leak beyond the cache.
  auto count_fds = [] {
    size_t n = 0;
    for (auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
      (void)e;
      ++n;
    }
    return n;
  };
  const size_t fds = count_fds();
  std::string got;
  for (int i = 0; i < 50; ++i) {
    struct stat st;
    ASSERT_EQ(ErrnoOf(Read(StrCat("missing", i), 0, 1, &got)), ENOENT);
    ASSERT_EQ(ErrnoOf(Getattr(StrCat("d", i, "/x"), &st)), ENOENT);
    ASSERT_TRUE(Getattr(StrCat("f", i), &st).ok());
    std::vector<DirEntry> entries;
    ASSERT_TRUE(Readdir("", &entries).ok());
  }
  EXPECT_EQ(count_fds(), fds);

  // Without a cache every IO opens and closes its own fd.
  options.max_open_files = 0;
  OpenEndpoint(options);
  ASSERT_TRUE(Write("f1", 0, "again").ok());
  EXPECT_EQ(ReadAll("f1"), "againnt 1");
  EXPECT_EQ(ep_->open_files(), 0u);
}

// Both with a cache too small for per-thread fronts (3) and with one that
// has them (64: 16 fronts and 48 shared entries).
class LocalEndpointConcurrencyTest
    : public LocalEndpointTest,
      public ::testing::WithParamInterface<size_t> {};

TEST_P(LocalEndpointConcurrencyTest, ConcurrentWritesAndReads) {
  LocalEndpoint::Options options;
  options.max_open_files = GetParam();
  OpenEndpoint(options);
  constexpr int kThreads = 4;
  // More files than the cache holds: constant eviction.
  const int kFiles = static_cast<int>(GetParam()) + 5;
  constexpr int kOps = 1000;
  constexpr size_t kRegion = 4096;
  for (int f = 0; f < kFiles; ++f) {
    ASSERT_TRUE(Create(StrCat("file", f), O_RDWR, 0644).ok());
  }
  std::atomic<int> completions{0};
  std::atomic<int> failures{0};
  std::vector<std::vector<std::string>> shadow(
      kThreads, std::vector<std::string>(kFiles, std::string(kRegion, '\0')));
  auto worker = [&](int t) {
    std::mt19937 rng(1234 + t);
    for (int i = 0; i < kOps; ++i) {
      const int f = static_cast<int>(rng() % kFiles);
      const std::string name = StrCat("file", f);
      const size_t off = rng() % kRegion;
      const size_t len = 1 + rng() % std::min<size_t>(256, kRegion - off);
      const uint64_t base = static_cast<uint64_t>(t) * kRegion;
      Io io;
      int calls = 0;
      io.set_completion([&](Io&) {
        ++calls;
        completions.fetch_add(1);
      });
      io.header.offset = base + off;
      io.header.length = len;
      std::string buf;
      if (rng() % 2 == 0) {
        buf.resize(len);
        for (char& c : buf) c = static_cast<char>('a' + rng() % 26);
        io.header.op = Op::kWrite;
        io.write_data = std::span<const char>(buf.data(), buf.size());
        ep_->Submit(&io, name);
        if (!io.status.ok() || io.bytes != len) {
          failures.fetch_add(1);
        } else {
          shadow[t][f].replace(off, len, buf);
        }
      } else {
        buf.assign(len, '\xFF');
        io.header.op = Op::kRead;
        io.read_buffer = std::span<char>(buf.data(), buf.size());
        ep_->Submit(&io, name);
        // Bytes past EOF read short; they are zeros in the shadow.
        if (!io.status.ok()) {
          failures.fetch_add(1);
        } else {
          std::string expect = shadow[t][f].substr(off, len);
          buf.resize(io.bytes);
          if (expect.substr(0, io.bytes) != buf ||
              expect.find_first_not_of('\0', io.bytes) != std::string::npos) {
            failures.fetch_add(1);
          }
        }
      }
      if (calls != 1) failures.fetch_add(1);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(completions.load(), kThreads * kOps);
  EXPECT_LE(ep_->open_files(), GetParam());

  for (int f = 0; f < kFiles; ++f) {
    const std::string host = ReadHostFile(StrCat(root_, "/file", f));
    for (int t = 0; t < kThreads; ++t) {
      std::string region = host.size() > t * kRegion
                               ? host.substr(t * kRegion, kRegion)
                               : std::string();
      region.resize(kRegion, '\0');
      EXPECT_EQ(region, shadow[t][f]) << "file" << f << " thread " << t;
    }
  }
}

TEST_P(LocalEndpointConcurrencyTest, ConcurrentNamespaceChangesAndDataIo) {
  // Renames and unlinks racing with reads and writes: every IO completes
  // exactly once, and in the end each name reads what was last written to it.
  LocalEndpoint::Options options;
  options.max_open_files = GetParam();
  OpenEndpoint(options);
  std::atomic<int> bad{0};
  auto churn = [&](int t) {
    std::mt19937 rng(77 + t);
    const std::string a = StrCat("a", t), b = StrCat("b", t);
    for (int i = 0; i < 300; ++i) {
      const std::string data = StrCat("gen ", i);
      int expected = 5;
      Io c;
      int calls = 0;
      c.set_completion([&](Io&) { ++calls; });
      c.header.op = Op::kCreate;
      c.args.open_flags = O_RDWR | O_TRUNC;
      c.args.mode = 0644;
      ep_->Submit(&c, a);
      Io w;
      w.set_completion([&](Io&) { ++calls; });
      w.header.op = Op::kWrite;
      w.write_data = std::span<const char>(data.data(), data.size());
      ep_->Submit(&w, a);
      Io r;
      r.set_completion([&](Io&) { ++calls; });
      r.header.op = Op::kRenameFrom;
      r.args.second_file = b;
      ep_->Submit(&r, a);
      std::string buf(64, '\0');
      Io rd;
      rd.set_completion([&](Io&) { ++calls; });
      rd.header.op = Op::kRead;
      rd.header.length = buf.size();
      rd.read_buffer = std::span<char>(buf.data(), buf.size());
      ep_->Submit(&rd, b);
      if (!c.status.ok() || !w.status.ok() || !r.status.ok() ||
          !rd.status.ok() || std::string(buf.data(), rd.bytes) != data) {
        bad.fetch_add(1);
      }
      Io old;
      old.set_completion([&](Io&) { ++calls; });
      old.header.op = Op::kRead;
      old.header.length = buf.size();
      old.read_buffer = std::span<char>(buf.data(), buf.size());
      ep_->Submit(&old, a);
      if (ErrnoOf(old.status) != ENOENT) bad.fetch_add(1);
      if (rng() % 2 == 0) {
        Io u;
        u.set_completion([&](Io&) { ++calls; });
        u.header.op = Op::kUnlink;
        ep_->Submit(&u, b);
        if (!u.status.ok()) bad.fetch_add(1);
        ++expected;
      }
      if (calls != expected) bad.fetch_add(1);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) threads.emplace_back(churn, t);
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(ep_->open_files(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(MaxOpenFiles, LocalEndpointConcurrencyTest,
                         ::testing::Values(3, 64));

// --- Caller identity and deep paths ---

TEST_F(LocalEndpointTest, NamesAreMadeAsTheCaller) {
  ASSERT_TRUE(ScopedCredentials::Supported()) << "tests run as root";
  ASSERT_EQ(::chmod(root_.c_str(), 0777), 0);
  const Credentials alice = Credentials::Of(4321, 8765, {100, 200});
  auto as = [&](Op op, const std::string& path, uint32_t mode) {
    return Simple(op, path, [&](Io& io) {
      io.args.caller = alice;
      io.args.mode = mode;
      io.args.open_flags = O_RDWR;
      if (op == Op::kSymlink) io.args.symlink_text = "target";
    });
  };
  ASSERT_TRUE(as(Op::kCreate, "f", 0640).ok());
  ASSERT_TRUE(as(Op::kMkdir, "d", 0750).ok());
  ASSERT_TRUE(as(Op::kSymlink, "l", 0).ok());
  ASSERT_TRUE(as(Op::kMknod, "p", S_IFIFO | 0600).ok());
  for (const char* name : {"f", "d", "l", "p"}) {
    struct stat st;
    ASSERT_EQ(::lstat((root_ + "/" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4321u) << name;
    EXPECT_EQ(st.st_gid, 8765u) << name;
  }
  // The caller's own rights decide: no write permission in a root-owned
  // 0755 directory.
  ASSERT_EQ(::mkdir((root_ + "/closed").c_str(), 0755), 0);
  absl::Status s = as(Op::kCreate, "closed/f", 0644);
  EXPECT_EQ(ErrnoOf(s), EACCES) << s;
  // A supplementary group counts: chgrp to group 200 is allowed.
  s = Simple(Op::kSetattr, "f", [&](Io& io) {
    io.args.caller = alice;
    io.args.to_set = kSetGid;
    io.args.gid = 200;
  });
  ASSERT_TRUE(s.ok()) << s;
  struct stat st;
  ASSERT_EQ(::stat((root_ + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 200u);
  // The thread is the daemon again afterwards.
  ASSERT_TRUE(Simple(Op::kCreate, "closed/g", [](Io& io) {
                io.args.mode = 0644;
                io.args.open_flags = O_RDWR;
              }).ok());
  ASSERT_EQ(::stat((root_ + "/closed/g").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

TEST_F(LocalEndpointTest, DataIoOfAnOpenFileIgnoresItsNewMode) {
  ASSERT_TRUE(Create("f", O_RDWR, 0644).ok());
  // Not the owner: the caller may not change the mode.
  EXPECT_EQ(ErrnoOf(Simple(Op::kSetattr, "f",
                           [](Io& io) {
                             io.args.caller = Credentials::Of(4321, 8765);
                             io.args.to_set = kSetMode;
                             io.args.mode = 0;
                           })),
            EPERM);
  ASSERT_EQ(::chmod((root_ + "/f").c_str(), 0), 0);
  ASSERT_TRUE(Write("f", 0, "still").ok());
  EXPECT_EQ(ReadAll("f"), "still");
}

// kKillSetid: what a write by a caller without CAP_FSETID clears, made
// with the endpoint's rights although the caller may not chmod the file.
TEST_F(LocalEndpointTest, KillSetidClearsWhatAWriteByAnotherUserClears) {
  ASSERT_TRUE(ScopedCredentials::Supported()) << "tests run as root";
  const Credentials alice = Credentials::Of(4321, 8765, {100});
  auto kill = [&](const std::string& name, struct stat* st) {
    return Setattr(
        name, kKillSetid, [&](IoArgs& a) { a.caller = alice; }, st);
  };
  struct stat st;
  struct Case {
    const char* name;
    mode_t mode;
    gid_t gid;
    mode_t after;
  } cases[] = {
      {"su", 04777, 0, 0777},        // set-user-ID: always
      {"sg", 02775, 0, 0775},        // set-group-ID with group execute
      {"sgnx", 02764, 0, 0764},      // without: a writer outside the group
      {"sgnxm", 02764, 100, 02764},  // a member keeps it (mandatory locking)
      {"plain", 0755, 0, 0755},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(Create(c.name, O_RDWR, 0644).ok());
    const std::string f = root_ + "/" + c.name;
    ASSERT_EQ(::chown(f.c_str(), 0, c.gid), 0);
    ASSERT_EQ(::chmod(f.c_str(), c.mode), 0);
    ASSERT_TRUE(kill(c.name, &st).ok()) << c.name;
    EXPECT_EQ(st.st_mode & 07777, c.after) << c.name;
  }
  // File capabilities go too.
  const uint32_t cap[5] = {0x02000000, 1u << 10, 0, 0, 0};
  ASSERT_EQ(::setxattr((root_ + "/plain").c_str(), "security.capability", cap,
                       sizeof(cap), 0),
            0);
  ASSERT_TRUE(kill("plain", &st).ok());
  char value[32];
  EXPECT_EQ(::getxattr((root_ + "/plain").c_str(), "security.capability", value,
                       sizeof(value)),
            -1);
  EXPECT_EQ(errno, ENODATA);
  // A chmod of the caller's own in the same setattr is still hers to make.
  EXPECT_EQ(ErrnoOf(Setattr(
                "su", kSetMode | kKillSetid,
                [&](IoArgs& a) {
                  a.caller = alice;
                  a.mode = 0700;
                },
                &st)),
            EPERM);
  // Directories keep theirs.
  ASSERT_EQ(::mkdir((root_ + "/d").c_str(), 02777), 0);
  ASSERT_EQ(::chmod((root_ + "/d").c_str(), 02777), 0);
  ASSERT_TRUE(kill("d", &st).ok());
  EXPECT_EQ(st.st_mode & 07777, 02777u);
}

// kSizeByDescriptor: an ftruncate is judged by the descriptor's access, not
// by the mode now; a truncate by path still is.
TEST_F(LocalEndpointTest, TruncateByDescriptorIgnoresTheModeNow) {
  ASSERT_TRUE(ScopedCredentials::Supported()) << "tests run as root";
  const Credentials alice = Credentials::Of(4321, 8765);
  ASSERT_TRUE(Create("f", O_RDWR, 0644).ok());
  ASSERT_EQ(::chown((root_ + "/f").c_str(), 4321, 8765), 0);
  ASSERT_EQ(::chmod((root_ + "/f").c_str(), 0), 0);
  struct stat st;
  EXPECT_EQ(ErrnoOf(Setattr(
                "f", kSetSize,
                [&](IoArgs& a) {
                  a.caller = alice;
                  a.size = 7;
                },
                &st)),
            EACCES);
  ASSERT_TRUE(Setattr(
                  "f", kSetSize | kSizeByDescriptor,
                  [&](IoArgs& a) {
                    a.caller = alice;
                    a.size = 7;
                  },
                  &st)
                  .ok());
  EXPECT_EQ(st.st_size, 7);
  EXPECT_EQ(st.st_mode & 07777, 0u);
}

TEST_F(LocalEndpointTest, PathsLongerThanPathMax) {
  const std::string name(200, 'n');
  std::string path;
  for (int i = 0; i < 25; ++i) {
    path += (i ? "/" : "") + name;
    ASSERT_TRUE(
        Simple(Op::kMkdir, path, [](Io& io) { io.args.mode = 0755; }).ok())
        << i;
  }
  ASSERT_GT(path.size(), static_cast<size_t>(PATH_MAX));
  const std::string f = path + "/file";
  ASSERT_TRUE(Create(f, O_RDWR, 0644).ok());
  ASSERT_TRUE(Write(f, 0, "deep").ok());
  EXPECT_EQ(ReadAll(f), "deep");
  struct stat st;
  ASSERT_TRUE(Getattr(f, &st).ok());
  EXPECT_EQ(st.st_size, 4);
  ASSERT_TRUE(Simple(Op::kSetattr, f, [](Io& io) {
                io.args.to_set = kSetMode;
                io.args.mode = 0600;
              }).ok());
  ASSERT_TRUE(Simple(Op::kRenameFrom, f, [&](Io& io) {
                io.args.second_file = path + "/moved";
              }).ok());
  ASSERT_TRUE(Simple(Op::kLink, path + "/link", [&](Io& io) {
                io.args.second_file = path + "/moved";
              }).ok());
  ASSERT_TRUE(Getattr(path + "/link", &st).ok());
  EXPECT_EQ(st.st_nlink, 2u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_TRUE(Simple(Op::kUnlink, path + "/moved").ok());
  ASSERT_TRUE(Simple(Op::kUnlink, path + "/link").ok());
  // Still confined: a symlink deep down cannot lead out.
  std::string up;
  for (int i = 0; i < 30; ++i) up += "../";
  ASSERT_TRUE(Simple(Op::kSymlink, path + "/out", [&](Io& io) {
                io.args.symlink_text = up + "outside";
              }).ok());
  std::string got;
  EXPECT_EQ(ErrnoOf(Read(path + "/out/secret", 0, 10, &got)), EXDEV);
}

TEST_F(LocalEndpointTest, ShrinkOnlyTruncateNeverExtends) {
  ASSERT_TRUE(Create("f", O_RDWR, 0644).ok());
  ASSERT_TRUE(Write("f", 0, "0123456789").ok());
  auto shrink = [&](uint64_t size) {
    return Simple(Op::kTruncate, "f", [size](Io& io) {
      io.args.size = size;
      io.args.truncate_mode = TruncateMode::kShrinkOnly;
    });
  };
  ASSERT_TRUE(shrink(20).ok());
  EXPECT_EQ(ReadAll("f"), "0123456789");
  ASSERT_TRUE(shrink(4).ok());
  EXPECT_EQ(ReadAll("f"), "0123");
}

}  // namespace
}  // namespace sroute

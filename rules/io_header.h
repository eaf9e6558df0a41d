// SPDX-License-Identifier: Apache-2.0
// IoHeader: the match key of every IO, <source, op, file, offset, length>.
#ifndef SROUTE_RULES_IO_HEADER_H_
#define SROUTE_RULES_IO_HEADER_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace sroute {

// Op classes that rules match (docs/design.md §1). A bit mask so a pattern can
// name several classes at once.
enum OpClass : uint8_t {
  kOpClassRead = 1,    // r: read, getattr, readdir, readlink, getxattr, ...
  kOpClassWrite = 2,   // w: write, truncate/setattr, fsync, fallocate, ...
  kOpClassCreate = 4,  // c: create, mknod, mkdir, symlink, link
  kOpClassDelete = 8,  // d: unlink, rmdir
};
using OpClassMask = uint8_t;
inline constexpr OpClassMask kAllOpClasses = 0xF;

// Every operation an IO can carry.
enum class Op : uint8_t {
  kRead,
  kWrite,
  kGetattr,
  kLookup,
  kOpen,
  kReaddir,
  kReadlink,
  kGetxattr,
  kListxattr,
  kStatfs,
  kLseek,  // SEEK_DATA / SEEK_HOLE: offset in header.offset, whence in args
  kSetattr,
  kTruncate,
  kFsync,
  kFallocate,
  kSetxattr,
  kRemovexattr,
  kCreate,
  kMknod,
  kMkdir,
  kSymlink,
  kLink,
  kUnlink,
  kRmdir,
  kRenameFrom,  // rename is 'd' on its source ...
  kRenameTo,    // ... and 'c' on its target.
  // A close(2) of the file by one of its openers ('w'): stages write back
  // what they hold of it (a write-back cache); endpoints have nothing to do.
  // Sent only while a stage asked for it (SSwitch::WantsFlushes).
  kFlush,
};
inline constexpr int kNumOps = static_cast<int>(Op::kFlush) + 1;

OpClass ClassOf(Op op);
std::string_view OpName(Op op);

// A file's full name is "//HOST/PATH". HOST names an endpoint; PATH is
// relative to that endpoint's root (no leading '/').
struct FileName {
  std::string_view host;
  std::string_view path;
};
// Splits "//HOST/PATH"; returns false when `full` is not of that form.
bool SplitFileName(std::string_view full, FileName* out);
std::string JoinFileName(std::string_view host, std::string_view path);

// Ops whose IOs carry a byte extent and so are matched against ranged rules.
// Every other op matches only rules without a byte range.
inline bool HasByteExtent(Op op) {
  return op == Op::kRead || op == Op::kWrite || op == Op::kFallocate;
}

struct IoHeader {
  // The tenant that issued the IO. Never changed by delegates or stages.
  std::string source;
  // Empty when the IO comes from the tenant; "NAME" when stage NAME handed
  // the IO back to its sSwitch (rules then match it as source "stage:NAME").
  std::string stage;
  Op op = Op::kRead;
  std::string file;  // "//HOST/PATH"
  uint64_t offset = 0;
  uint64_t length = 0;

  OpClass op_class() const { return ClassOf(op); }
  uint64_t end() const { return offset + length; }
};

// "<source, op, file, offset, length>" for logs and traces.
std::string ToString(const IoHeader& h);

}  // namespace sroute

#endif  // SROUTE_RULES_IO_HEADER_H_

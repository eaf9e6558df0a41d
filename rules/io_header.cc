// SPDX-License-Identifier: Apache-2.0
#include "rules/io_header.h"

#include "util/strings.h"

namespace sroute {

OpClass ClassOf(Op op) {
  switch (op) {
    case Op::kRead:
    case Op::kGetattr:
    case Op::kLookup:
    case Op::kOpen:
    case Op::kReaddir:
    case Op::kReadlink:
    case Op::kGetxattr:
    case Op::kListxattr:
    case Op::kStatfs:
    case Op::kLseek:
      return kOpClassRead;
    case Op::kWrite:
    case Op::kSetattr:
    case Op::kTruncate:
    case Op::kFsync:
    case Op::kFallocate:
    case Op::kSetxattr:
    case Op::kRemovexattr:
    case Op::kFlush:
      return kOpClassWrite;
    case Op::kCreate:
    case Op::kMknod:
    case Op::kMkdir:
    case Op::kSymlink:
    case Op::kLink:
    case Op::kRenameTo:
      return kOpClassCreate;
    case Op::kUnlink:
    case Op::kRmdir:
    case Op::kRenameFrom:
      return kOpClassDelete;
  }
  return kOpClassRead;
}

std::string_view OpName(Op op) {
  switch (op) {
    case Op::kRead:
      return "read";
    case Op::kWrite:
      return "write";
    case Op::kGetattr:
      return "getattr";
    case Op::kLookup:
      return "lookup";
    case Op::kOpen:
      return "open";
    case Op::kReaddir:
      return "readdir";
    case Op::kReadlink:
      return "readlink";
    case Op::kGetxattr:
      return "getxattr";
    case Op::kListxattr:
      return "listxattr";
    case Op::kStatfs:
      return "statfs";
    case Op::kLseek:
      return "lseek";
    case Op::kSetattr:
      return "setattr";
    case Op::kTruncate:
      return "truncate";
    case Op::kFsync:
      return "fsync";
    case Op::kFallocate:
      return "fallocate";
    case Op::kSetxattr:
      return "setxattr";
    case Op::kRemovexattr:
      return "removexattr";
    case Op::kCreate:
      return "create";
    case Op::kMknod:
      return "mknod";
    case Op::kMkdir:
      return "mkdir";
    case Op::kSymlink:
      return "symlink";
    case Op::kLink:
      return "link";
    case Op::kUnlink:
      return "unlink";
    case Op::kRmdir:
      return "rmdir";
    case Op::kRenameFrom:
      return "rename_from";
    case Op::kRenameTo:
      return "rename_to";
    case Op::kFlush:
      return "flush";
  }
  return "?";
}

bool SplitFileName(std::string_view full, FileName* out) {
  if (full.size() < 3 || full[0] != '/' || full[1] != '/') return false;
  const size_t slash = full.find('/', 2);
  if (slash == std::string_view::npos || slash == 2) return false;
  out->host = full.substr(2, slash - 2);
  out->path = full.substr(slash + 1);
  return true;
}

std::string JoinFileName(std::string_view host, std::string_view path) {
  return StrCat("//", host, "/", path);
}

std::string ToString(const IoHeader& h) {
  return StrCat("<", h.stage.empty() ? h.source : "stage:" + h.stage, "(",
                h.source, "), ", OpName(h.op), ", ", h.file, ", ", h.offset,
                ", ", h.length, ">");
}

}  // namespace sroute

// SPDX-License-Identifier: Apache-2.0
// LocalEndpoint: an endpoint that is a directory on this machine.
//
// Every path is resolved beneath the root: ".." and symlinks that would leave
// it are refused (openat2 with RESOLVE_BENEATH), never followed. Open file
// descriptors for data IO are kept in a bounded cache, so the endpoint never
// holds one descriptor per known file.
#ifndef SROUTE_ENDPOINTS_LOCAL_ENDPOINT_H_
#define SROUTE_ENDPOINTS_LOCAL_ENDPOINT_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "sswitch/endpoint.h"

namespace sroute {

class LocalEndpoint : public Endpoint {
 public:
  struct Options {
    size_t max_open_files = 1024;
  };
  // Fails if `root` is not an accessible directory.
  static absl::StatusOr<std::shared_ptr<LocalEndpoint>> Open(
      const std::string& root, Options options);
  static absl::StatusOr<std::shared_ptr<LocalEndpoint>> Open(
      const std::string& root) {
    return Open(root, Options());
  }
  ~LocalEndpoint() override;

  // Completes `io` before returning, unless the calling thread must not
  // block (BlockingCallsGoTo(), util/helper_pool.h): then only a read the
  // page cache holds completes here, and every other call on a helper of
  // that pool (a hung filesystem holds the helper, not the caller's
  // thread). Ops and their fields:
  //   read/write: header.offset/length, read_buffer/write_data -> bytes
  //   getattr/lookup: -> attr (lstat)     open: checks the file exists
  //   readdir: -> entries                 readlink: -> data
  //   getxattr (args.xattr_name): -> data      listxattr: -> data
  //   setxattr (args.xattr_name, write_data = value, args.xattr_flags)
  //   removexattr (args.xattr_name)
  //   statfs: -> data holds a struct statvfs
  //   setattr (args.to_set, mode/uid/gid/size/atime/mtime) -> attr
  //   truncate (args.size, args.truncate_mode)
  //   fsync (args.datasync)  fallocate (args.fallocate_mode, offset/length)
  //   lseek (header.offset, args.whence = SEEK_DATA|SEEK_HOLE) -> bytes
  //   create (args.mode, args.open_flags) mknod (args.mode, args.size = rdev)
  //   mkdir (args.mode)  symlink (args.symlink_text)
  //   link (args.second_file = existing path)   unlink  rmdir
  //   rename_from (args.second_file = new path, args.rename_flags)
  //   (Paths in args.second_file are relative to this endpoint's root: the
  //   sSwitch turns the full names it routes into them.)
  //   rename_to: the mirror (path = new name, args.second_file = old path)
  // Errors carry the syscall's errno (util/errno_status.h).
  void Submit(Io* io, std::string_view path) override;

  const std::string& root() const;
  std::string Describe() const override { return root(); }
  // Opens the regular file `path` beneath the root for reading (for a
  // kernel passthrough's backing file, fuse/passthrough.h): the descriptor,
  // or -errno (EPERM for a file with set-ID bits, whose writes past the
  // daemon would keep them; EINVAL for one not regular).
  int OpenRegularForPassthrough(std::string_view path) const;
  // Data-IO file descriptors open now (cached, or in use by an IO).
  size_t open_files() const;

 private:
  struct Impl;
  explicit LocalEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_ENDPOINTS_LOCAL_ENDPOINT_H_

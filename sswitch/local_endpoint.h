// LocalEndpoint: an endpoint that is a directory on this machine.
//
// Every path is resolved beneath the root: ".." and symlinks that would leave
// it are refused (openat2 with RESOLVE_BENEATH), never followed. Open file
// descriptors for data IO are kept in a bounded cache, so the endpoint never
// holds one descriptor per known file.
#ifndef SROUTE_SSWITCH_LOCAL_ENDPOINT_H_
#define SROUTE_SSWITCH_LOCAL_ENDPOINT_H_

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

  // Synchronous: completes `io` before returning. Ops and their fields:
  //   read/write: header.offset/length, read_buffer/write_data -> bytes
  //   getattr/lookup: -> attr (lstat)     open: checks the file exists
  //   readdir: -> entries                 readlink: -> data
  //   getxattr/listxattr (args.other = name): -> data
  //   setxattr (args.other = name, write_data = value, args.flags)
  //   removexattr (args.other)
  //   statfs: -> data holds a struct statvfs
  //   setattr (args.to_set, mode/uid/gid/size/atime/mtime) -> attr
  //   truncate (args.size; args.flags: kTruncateGrowOnly, kTruncateShrinkOnly)
  //   fsync  fallocate (args.flags = mode, offset/length)
  //   lseek (header.offset, args.flags = SEEK_DATA|SEEK_HOLE) -> bytes = offset
  //   create (args.mode, args.flags) mknod (args.mode, args.size = rdev)
  //   mkdir (args.mode)  symlink (args.other = link text)
  //   link (args.other = existing path)   unlink  rmdir
  //   rename_from (args.other = new path, args.flags = RENAME_* flags)
  //   (Paths in args.other are relative to this endpoint's root: the sSwitch
  //   turns the full names it routes into them.)
  //   rename_to: the mirror (path = new name, args.other = old path)
  // Errors carry the syscall's errno (util/errno_status.h).
  void Submit(Io* io, std::string_view path) override;

  const std::string& root() const;
  // Data-IO file descriptors open now (cached, or in use by an IO).
  size_t open_files() const;

 private:
  struct Impl;
  explicit LocalEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace sroute

#endif  // SROUTE_SSWITCH_LOCAL_ENDPOINT_H_

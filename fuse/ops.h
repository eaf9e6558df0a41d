// SPDX-License-Identifier: Apache-2.0
// The FUSE low-level ops of a Volume, one group per file (internal).
#ifndef SROUTE_FUSE_OPS_H_
#define SROUTE_FUSE_OPS_H_

#include <string>

#include "fuse/session_loop.h"
#include "fuse/volume.h"

namespace sroute::fuse_internal {

// ops_entry.cc
void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name);
void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets);
void Getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set,
             fuse_file_info* fi);
void Readlink(fuse_req_t req, fuse_ino_t ino);
void Mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
           dev_t rdev);
void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
void Symlink(fuse_req_t req, const char* link, fuse_ino_t parent,
             const char* name);
void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
          const char* newname);
void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name);
void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name);
void Rename(fuse_req_t req, fuse_ino_t parent, const char* name,
            fuse_ino_t newparent, const char* newname, unsigned int flags);

// ops_file.cc
void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode,
            fuse_file_info* fi);
void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
          fuse_file_info* fi);
// FUSE_READ without libfuse (RawHandler).
bool ServeRawRead(Volume& volume, fuse_session* se, const RawRequest& raw);
void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size,
           off_t off, fuse_file_info* fi);
// FUSE_WRITE without libfuse (RawHandler); the data stays in the worker's
// receive buffer (SubmitWrite).
bool ServeRawWrite(Volume& volume, fuse_session* se, const RawRequest& raw);
void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
// Removes `path`, the hidden name of an unlinked file whose last handle
// closed (a removal the inode table counts), as the daemon; then runs what
// waited for it and answers `reply`, if not null, with success (a failure
// is logged).
void RemoveHiddenName(Volume& volume, const std::string& path,
                      fuse_req_t reply);
void Flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
void Lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
           fuse_file_info* fi);
void Fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
               off_t length, fuse_file_info* fi);

// ops_dir.cc
void Opendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
             fuse_file_info* fi);
void Releasedir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void Fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);

// ops_misc.cc
void Statfs(fuse_req_t req, fuse_ino_t ino);
void Setxattr(fuse_req_t req, fuse_ino_t ino, const char* name,
              const char* value, size_t size, int flags);
void Getxattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size);
void Listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void Removexattr(fuse_req_t req, fuse_ino_t ino, const char* name);

}  // namespace sroute::fuse_internal

#endif  // SROUTE_FUSE_OPS_H_

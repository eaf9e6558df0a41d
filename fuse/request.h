// Request: one FUSE request in flight as an Io (internal to fuse/).
#ifndef SROUTE_FUSE_REQUEST_H_
#define SROUTE_FUSE_REQUEST_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fuse/volume.h"
#include "util/errno_status.h"

namespace sroute::fuse_internal {

struct Request {
  Volume* volume = nullptr;
  fuse_req_t req = nullptr;
  Io io;
  std::vector<char> buffer;  // a copy of write data
  // Read destination: not zero-filled, only the bytes read are sent.
  std::unique_ptr<char[]> read_data;
  uint64_t parent = 0;       // for replies that create an entry
  std::string name;
  fuse_file_info fi{};
  bool has_fi = false;
};

// A request for `op` on the volume-relative `path`, with the caller's tenant
// and credentials in the header and args.
std::unique_ptr<Request> NewRequest(fuse_req_t req, Op op,
                                    const std::string& path);

// Routes the request; `reply` runs once when the IO completes (possibly on
// another thread) and must reply to the kernel. The request is freed after.
void Submit(std::unique_ptr<Request> r, std::function<void(Request&)> reply);

// Replies with the IO's errno.
void ReplyError(Request& r);
// Replies to lookup/create-like requests: remembers the node and sends its
// entry.
void ReplyEntry(Request& r);
fuse_entry_param MakeEntry(Request& r);
Volume& VolumeOf(fuse_req_t req);
// Path of `ino` or reply ESTALE (returns false).
bool PathOf(fuse_req_t req, uint64_t ino, std::string* path);
bool ChildPathOf(fuse_req_t req, uint64_t parent, const char* name,
                 std::string* path);

}  // namespace sroute::fuse_internal

#endif  // SROUTE_FUSE_REQUEST_H_

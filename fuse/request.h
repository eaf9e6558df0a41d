// Request: one FUSE request in flight as an Io (internal to fuse/).
#ifndef SROUTE_FUSE_REQUEST_H_
#define SROUTE_FUSE_REQUEST_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
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
  uint64_t parent = 0;  // for replies that create an entry
  std::string name;
  fuse_file_info fi{};
  bool has_fi = false;
};

// A request for `op` on the volume-relative `path`, with the caller's tenant
// and credentials in the header and args.
std::unique_ptr<Request> NewRequest(fuse_req_t req, Op op,
                                    const std::string& path);
// The same for the file named `file` ("//HOME/PATH").
std::unique_ptr<Request> NewFileRequest(fuse_req_t req, Op op,
                                        std::string file);

// An open regular file (fuse_file_info::fh). It keeps the file's name as of
// an inode-table generation, so reads and writes take neither the table's
// lock nor build the name again while no name in the volume changes.
class OpenFile {
 public:
  static OpenFile* Of(const fuse_file_info* fi) {
    return reinterpret_cast<OpenFile*>(fi->fh);
  }
  // Sets *file to the name of `ino` ("//HOME/PATH"), or replies ESTALE and
  // returns false.
  bool FileName(fuse_req_t req, uint64_t ino, std::string* file);

 private:
  // The generation `file_` is valid for (0: none yet).
  std::atomic<uint64_t> valid_generation_{0};
  std::atomic<const std::string*> file_{nullptr};
  std::mutex mu_;  // serializes refreshes
  // Every name file_ has pointed to: a reader may still hold an old one.
  // Grows only when the file's path changes while it is open (a rename).
  std::vector<std::unique_ptr<const std::string>> names_;  // guarded by mu_
};

// Routes the request; `reply` (callable as void(Request&)) runs once when
// the IO completes (possibly on another thread) and must reply to the
// kernel. The request is freed after. A template rather than a
// std::function: the completion then holds the callable itself, without an
// allocation of its own on every IO.
template <typename Reply>
void Submit(std::unique_ptr<Request> r, Reply reply) {
  Request* raw = r.release();
  raw->io.set_completion([raw, reply = std::move(reply)](Io&) mutable {
    std::unique_ptr<Request> owned(raw);
    reply(*owned);
  });
  raw->volume->sswitch().Route(&raw->io);
}

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

// SPDX-License-Identifier: Apache-2.0
// Request: one FUSE request in flight as an Io (internal to fuse/).
#ifndef SROUTE_FUSE_REQUEST_H_
#define SROUTE_FUSE_REQUEST_H_

#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "fuse/session_loop.h"
#include "fuse/volume.h"
#include "util/errno_status.h"
#include "util/mutex.h"

namespace sroute::fuse_internal {

// A read's destination: page-aligned (a 4 KiB read into two pages costs the
// kernel two page pins and copies, for the backing read and the reply), and
// reused by the thread that frees it (a read of a few KiB is too large for
// glibc's per-thread cache and would take the malloc arena's lock twice).
class ReadBuffer {
 public:
  ReadBuffer() = default;
  ~ReadBuffer() { Release(); }
  ReadBuffer(const ReadBuffer&) = delete;
  ReadBuffer& operator=(const ReadBuffer&) = delete;
  // At least `size` bytes, replacing any earlier buffer.
  void Allocate(size_t size);
  char* get() const { return data_; }

 private:
  void Release();
  char* data_ = nullptr;
  int size_class_ = -1;  // -1: too large to keep
};

struct Request {
  Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  Volume* volume = nullptr;
  // libfuse's request; null for one a RawHandler took, which is answered
  // on `session` by its `unique` id (SendRawReply).
  fuse_req_t req = nullptr;
  fuse_session* session = nullptr;
  uint64_t unique = 0;
  Io io;
  std::vector<char> buffer;  // a copy of write data
  // The worker's receive buffer holding the write data, if the request
  // took it (SubmitWrite); given back when the request is freed.
  void* request_buffer = nullptr;
  // Submit: the submitter and the completion (once it replied) each drop
  // one; the last frees the request.
  std::atomic<int> owners{1};
  // Read destination: not zero-filled, only the bytes read are sent.
  ReadBuffer read_data;
  uint64_t parent = 0;  // for replies that create an entry
  std::string name;
  fuse_file_info fi{};
  bool has_fi = false;
};

// Who sent a request.
struct Caller {
  uid_t uid;
  gid_t gid;
  pid_t pid;
};

// A request for `op` on the volume-relative `path`, with the caller's tenant
// and credentials in the header and args.
std::unique_ptr<Request> NewRequest(fuse_req_t req, Op op,
                                    const std::string& path);
// The same for the file named `file` ("//HOME/PATH").
std::unique_ptr<Request> NewFileRequest(fuse_req_t req, Op op,
                                        std::string file);
// The same for a request a RawHandler took; `req` stays null.
std::unique_ptr<Request> NewFileRequest(Volume& volume, const Caller& caller,
                                        Op op, std::string file);

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
  // The same without replying: false if `ino` is no longer known.
  bool FileName(Volume& volume, uint64_t ino, std::string* file);

  // The inode the kernel opened (0: not known).
  uint64_t ino = 0;
  // Kernel passthrough's backing id (fuse/passthrough.h) when the kernel
  // serves this open from the backing file itself; 0: through the daemon.
  int32_t backing_id = 0;
  bool writes = false;  // opened for writing
  // Whether the open uses the kernel's page cache (keep_cache): while it
  // lives, the inode is not opened past the daemon.
  bool cached = false;

  // Who opened the file. The kernel sends the writes of pages written
  // through a shared mapping (FUSE_WRITE_CACHE) as uid 0, pid 0: they are
  // routed as the opener's, so that a tenant's rules see them.
  Caller opener{0, 0, 0};

  // Whether the file is known to have no set-ID bits and no capabilities
  // while the volume's setid_generation() is `generation` (0: unknown).
  // Thread-safe.
  bool KnownWithoutSetid(uint64_t generation) const {
    return generation != 0 &&
           without_setid_.load(std::memory_order_acquire) == generation;
  }
  void SetWithoutSetid(uint64_t generation) {
    without_setid_.store(generation, std::memory_order_release);
  }

 private:
  // The generation `file_` is valid for (0: none yet).
  std::atomic<uint64_t> valid_generation_{0};
  std::atomic<uint64_t> without_setid_{0};
  std::atomic<const std::string*> file_{nullptr};
  // Serializes refreshes; guards names_. Order: after InodeTable::mu_ is
  // released (never held together); a leaf.
  Mutex mu_;
  // Every name file_ has pointed to: a reader may still hold an old one.
  // Grows only when the file's path changes while it is open (a rename).
  std::vector<std::unique_ptr<const std::string>> names_ ABSL_GUARDED_BY(mu_);
};

// Drops one of a routed request's two owners (the submitter, until
// routing returns; the completion, once it replied); the last frees it.
inline void DropOwner(Request* r) {
  if (r->owners.fetch_sub(1, std::memory_order_acq_rel) == 1) delete r;
}

// Routes `r` with `reply` as its completion, and returns still owning it:
// the caller must DropOwner it.
template <typename Reply>
Request* RouteOwned(std::unique_ptr<Request> r, Reply reply) {
  Request* raw = r.release();
  raw->owners.store(2, std::memory_order_relaxed);
  raw->io.set_completion([raw, reply = std::move(reply)](Io&) mutable {
    reply(*raw);
    DropOwner(raw);
  });
  raw->volume->sswitch().Route(&raw->io);
  return raw;
}

// Routes the request; `reply` (callable as void(Request&)) runs once when
// the IO completes (possibly on another thread, possibly before routing
// returns) and must reply to the kernel. The request is freed once both
// happened: routing may still be unwinding when a completion it ran
// replied. A template rather than a std::function: the completion then
// holds the callable itself, without an allocation of its own on every IO.
template <typename Reply>
void Submit(std::unique_ptr<Request> r, Reply reply) {
  DropOwner(RouteOwned(std::move(r), std::move(reply)));
}

// Submit for a write whose data (`size` bytes at `payload`) is libfuse's:
// it lies in the buffer the worker received the request into, reused once
// the handler returns. The IO uses the data where it is; if the IO is
// still in flight when routing returns (parked by a quiesce, at a stage or
// the controller, sent to a storage server), the request takes that buffer
// from the worker, so the data lives until the completion without a copy.
// Off a worker's request buffer the data is copied first.
template <typename Reply>
void SubmitWrite(std::unique_ptr<Request> r, const char* payload, size_t size,
                 Reply reply) {
  if (!InRequestBuffer(payload)) {
    r->buffer.assign(payload, payload + size);
    r->io.write_data = std::span<const char>(r->buffer);
    Submit(std::move(r), std::move(reply));
    return;
  }
  r->io.write_data = std::span<const char>(payload, size);
  Request* raw = RouteOwned(std::move(r), std::move(reply));
  // The completion has not dropped its owner yet: the IO may still use the
  // data. (Taking the buffer when the IO completes meanwhile is harmless:
  // the worker gets another.)
  if (raw->owners.load(std::memory_order_acquire) == 2) {
    raw->request_buffer = TakeRequestBuffer(payload);
  }
  DropOwner(raw);
}

// Replies with the IO's errno.
void ReplyError(Request& r);
// Replies with `size` bytes of `data`.
void ReplyData(Request& r, const char* data, size_t size);
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

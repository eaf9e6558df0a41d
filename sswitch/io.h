// SPDX-License-Identifier: Apache-2.0
// Io: one request in flight: a header, a payload, and a completion that runs
// exactly once.
#ifndef SROUTE_SSWITCH_IO_H_
#define SROUTE_SSWITCH_IO_H_

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "rules/io_header.h"
#include "sswitch/credentials.h"

namespace sroute {

class SSwitch;
class RuleEntry;
struct Snapshot;
struct DrainWaiter;
class Trace;

// How a truncate changes the file's size (IoArgs::truncate_mode).
enum class TruncateMode : uint8_t {
  // Make the file exactly args.size bytes long (a user's truncate).
  kExact,
  // Make the file at least args.size bytes long, never shorter (the last
  // byte may become zero: it lies in a range detoured elsewhere). The
  // sSwitch's own growing of a file's home.
  kGrowOnly,
  // Make the file at most args.size bytes long, never longer (a file
  // holding a byte range of another whose size went down).
  kShrinkOnly,
};

// Operation arguments beyond the header. Only the fields an op uses are set;
// each field's comment names the ops that read it.
//
// One plain field per meaning rather than a std::variant over the ops: the
// fields stay readable at every site (io.args.xattr_name, not
// std::get<XattrArgs>(io.args.op).name), and they are cheap. The integers
// cost nothing to set up; the three strings are empty (no allocation) on the
// read/write path and only ever filled by the op that names them. An Io is
// built per request, so nothing here may allocate unless the op needs it.
struct IoArgs {
  uint32_t mode = 0;  // create, mkdir, mknod, setattr (chmod)
  // open, create: open(2) flags (O_ACCMODE, O_TRUNC, O_EXCL, O_NOFOLLOW, ...).
  int open_flags = 0;
  // rename_from, rename_to: renameat2(2) flags (RENAME_NOREPLACE,
  // RENAME_EXCHANGE).
  uint32_t rename_flags = 0;
  int xattr_flags = 0;     // setxattr: XATTR_CREATE, XATTR_REPLACE
  int fallocate_mode = 0;  // fallocate: fallocate(2) mode (FALLOC_FL_*)
  int whence = 0;          // lseek: SEEK_DATA or SEEK_HOLE
  TruncateMode truncate_mode = TruncateMode::kExact;  // truncate
  bool datasync = false;  // fsync (of a file or a directory): fdatasync only
  uint32_t uid = 0;       // setattr: the new owner (chown)
  uint32_t gid = 0;
  uint32_t to_set = 0;  // setattr: which of the fields below are set
  uint64_t size = 0;    // setattr, truncate: the new size
  uint64_t rdev = 0;    // mknod: the device of a device node
  struct timespec atime = {0, 0};
  struct timespec mtime = {0, 0};
  // rename_from: the new name; rename_to: the old name; link: the existing
  // file (the header names the new link). A full name "//HOST/PATH" while
  // the IO is routed, relative to the endpoint's root once it is at its
  // endpoint, and on the wire (rpc/io_codec.h).
  std::string second_file;
  std::string symlink_text;  // symlink: the link's text, stored as is
  // getxattr, setxattr, removexattr: the attribute's name (the value of a
  // setxattr is Io::write_data).
  std::string xattr_name;
  // Who asked: endpoints create names and change attributes as them
  // (sswitch/credentials.h). Unset for what the sSwitch does on its own.
  Credentials caller;
};

enum SetattrField : uint32_t {
  kSetMode = 1,
  kSetUid = 2,
  kSetGid = 4,
  kSetSize = 8,
  kSetAtime = 16,
  kSetMtime = 32,
  // After the other changes, clears the set-user-ID bit, the set-group-ID
  // bit of a group-executable file, and the file's capabilities
  // (security.capability), with the endpoint's own rights: what a write,
  // truncate or chown by a caller without CAP_FSETID does on a local file
  // system, allowed to a caller who may write but does not own the file
  // (fuse/kill_setid.h says when the volume asks for it). Alone: a setattr
  // that does only this.
  kKillSetid = 64,
  // The size change comes through a descriptor open for writing
  // (ftruncate): its access was judged when it was opened, so it is made
  // with the endpoint's own rights, never re-checked against the file's
  // mode now (a file created with mode 0, or chmod'ed to 0 while open).
  kSizeByDescriptor = 128,
};

// A rule a delegate made for an IO, stored with the IO where it lands so the
// rule outlives a restart of the sSwitch that made it (docs/design.md §5).
struct DelegateRuleRecord {
  std::string sswitch;  // the sSwitch whose delegate made the rule
  uint64_t seq = 0;     // that sSwitch's order of records (newest highest)
  std::string rule;     // the rule, in the rule language
  std::string anchor;   // the pattern of the delegate's own rule
  bool operator==(const DelegateRuleRecord&) const = default;
};

struct DirEntry {
  std::string name;
  uint32_t type = 0;  // DT_* value
  uint64_t ino = 0;
};

class Io {
 public:
  using Completion = absl::AnyInvocable<void(Io&)>;
  // Runs on the response path before the completion (a stage filling a cache,
  // a tracer stamping time). May change status and results.
  using ResponseHook = absl::AnyInvocable<void(Io&)>;

  Io() = default;
  Io(const Io&) = delete;
  Io& operator=(const Io&) = delete;
  ~Io();

  IoHeader header;
  // Write payload (owned by the issuer; valid until completion).
  std::span<const char> write_data;
  // Read destination (owned by the issuer; valid until completion).
  std::span<char> read_buffer;
  // Rules delegates made for this IO, for the endpoint that stores it.
  std::vector<DelegateRuleRecord> records;
  // Not held by quiesces: set on the IOs of a reclaim (hostctl/
  // copy_tree.h), which quiesces the applications' writes to the range it
  // moves and must itself go through.
  bool passes_quiesce = false;

  // Results, valid in the completion.
  absl::Status status;
  uint64_t bytes = 0;             // bytes read or written
  struct stat attr = {};          // getattr, create, mkdir, ...
  std::string data;               // readlink text, xattr value/list
  std::vector<DirEntry> entries;  // readdir
  // The file this IO was last sent to ("//HOST/PATH"), for traces and for
  // delegates on the response path.
  std::string target;
  // Opens answered by a storage server: a stamp that changes whenever a
  // change to the file starts or ends there (0: no such stamp). Caches on
  // other hosts compare it at each open (close-to-open).
  uint64_t change_stamp = 0;
  // The device that served it was congested (slower than its profile
  // says at its load: stages/steering/congestion.h), as its host judged;
  // replica sets shift reads away from it (issue 49).
  bool congested = false;
  // Which of the host's judged windows marked it (0: not said). The mark
  // is refreshed once a window (10 ms or more), not once a reply: callers
  // cut once per window they see (stages/steering/aimd.h).
  uint32_t congested_window = 0;
  // The op's arguments. Last of the public fields: most IOs (reads and
  // writes) use none of them, and the fields every IO touches then share
  // their cache lines as before IoArgs gave each meaning a field of its own
  // (BM_RouteBenchFile, bench/RESULTS.md).
  IoArgs args;
  // Sampled for tracing (sswitch/trace.h): each hop adds its segment. Null
  // for the IOs not sampled: all they pay.
  std::shared_ptr<Trace> trace;
  // When the request that brought this IO was read off the network
  // (util/clock.h); 0 if it came over none. A traced IO shows the time
  // from then until it is routed as its "queue" hop: the server's backlog
  // (and its decoding of the request), apart from the network before it
  // and the device after it.
  uint64_t arrived_ns = 0;

  void set_completion(Completion done) { done_ = std::move(done); }
  // Takes the results of `child`, an IO the router sent in this one's place
  // (bytes, attr, data, entries, target); the status stays for Complete.
  void AdoptResults(const Io& child);
  // Adds a hook that runs, newest first, when the IO completes.
  void AddResponseHook(ResponseHook hook);

  // Sets the status and runs the response path and then the completion.
  // Exactly once: later calls are ignored (and counted by `extra_completions`).
  void Complete(absl::Status s);
  void Complete() { Complete(absl::OkStatus()); }
  bool completed() const { return completed_; }
  // The version of the rule snapshot the IO was routed with (0 before).
  uint64_t routed_version() const;
  // The id of the last rule that routed the IO (0 for none), e.g. the one
  // that sent it to a stage.
  uint64_t rule_id() const;
  // The index of this IO among the pieces of a split or the copies of a
  // scatter it belongs to; -1 for an IO of its own.
  int32_t copy() const { return copy_; }

  static std::atomic<uint64_t> extra_completions;

  // This IO may outlive its parent (a hedged read's loser): it notes where
  // it waits in a slot of its own, not in its parent's.
  void KeepOwnWaitingSlot() { waiting_at_ = &where_; }

 private:
  friend class SSwitch;
  friend class InflightRegistry;
  friend struct EndpointEntry;  // Sent: notes where the IO waits

  struct Frame {
    // Either a hook or a rule the IO was routed by.
    ResponseHook hook;
    const RuleEntry* rule = nullptr;
    uint64_t start_ns = 0;
    // Where the rule sent the IO; kept only for delegates that want the
    // response.
    std::vector<std::string> targets;
    // This rule's delegate sampled the IO for tracing: its frame's end
    // ends the trace (the sSwitch keeps it, SSwitch::RecentTraces).
    bool sampled = false;
  };

  Completion done_;
  absl::InlinedVector<Frame, 2> frames_;
  bool completed_ = false;

  // Routing state, owned by the sSwitch that routes the IO.
  SSwitch* router_ = nullptr;
  std::shared_ptr<const Snapshot> snapshot_;
  uint8_t stage_hops_ = 0;
  // In-flight registry links (see sswitch.cc).
  Io* inflight_prev_ = nullptr;
  Io* inflight_next_ = nullptr;
  int inflight_shard_ = -1;
  absl::InlinedVector<std::shared_ptr<DrainWaiter>, 1> drain_waiters_;
  // SSwitch::RouteToStage: the stage it enters once admitted (a quiesce
  // parks it first, as any IO).
  std::string to_stage_;
  // A piece of a split or a copy of a scatter: its index (traces' `copy`).
  int32_t copy_ = -1;
  // Made by the sSwitch in another IO's place (SSwitch::NewChild): its end
  // is not the end of what the caller asked.
  bool child_ = false;
  // When a scan for stale IOs (SSwitch::StaleIos) first saw it; guarded by
  // the lock of the list that holds it (in flight or parked).
  uint64_t first_seen_ns_ = 0;
  // Traced IOs: when a quiesce parked it (0: not parked).
  uint64_t parked_ns_ = 0;
  // Where the IO (or a child made in its place) was last handed: an
  // endpoint or a stage, an interned name (util/interned.h). Written by the
  // routing threads, read by SSwitch::StaleIos while the IO is registered
  // in flight. A child (SSwitch::NewChild) writes its parent's slot, which
  // outlives it, but for scatter copies, which may not: they keep their
  // own, and the parent says it waits for its copies.
  std::atomic<const std::string*> where_{nullptr};
  std::atomic<const std::string*>* waiting_at_ = &where_;
  void NoteWaitingAt(const std::string* where) {
    waiting_at_->store(where, std::memory_order_release);
  }
};

// Whether `io` changes a file's bytes or which bytes a name holds (writes,
// truncates, fallocate, unlink, rename, O_TRUNC opens): what change
// observers (SSwitch::AddChangeObserver) and change stamps count.
bool ChangesFileBytes(const Io& io);

}  // namespace sroute

#endif  // SROUTE_SSWITCH_IO_H_
